package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/escra-dev/escra/controller/imageresolve"
	placementpkg "github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Bounds on one host's image report: a daemon cannot grow the
// controller's memory without limit.
const (
	maxReportedImages = 20000
	maxImageNames     = 64
	maxImageLayers    = 256
	maxImageString    = 512
)

// ImageState keeps a host's image and layer state (dependency-aware scheduling §4.2–4.3),
// replacing the previous one.
func (s *Server) ImageState(ss *session.Session, st *pb.ImageState) {
	h := s.host(ss.ID)
	if h == nil {
		s.BadInput(ss, "image_state", errors.New("image state before hello"))
		return
	}
	if err := checkImageState(st); err != nil {
		s.BadInput(ss, "image_state", err)
		return
	}
	rep := make([]imageresolve.ImageReport, 0, len(st.GetImages()))
	for _, im := range st.GetImages() {
		rep = append(rep, imageresolve.ImageReport{ID: im.GetId(), Names: im.GetNames(), DiffIDs: im.GetDiffIds()})
	}
	d := imageresolve.HostDeps(rep)
	h.deps.Store(d)
	s.log.Debug("host image state", "host", h.hello.GetHostId(), "images", len(rep), "layers", len(d.Layers), "store_bytes", st.GetStoreBytes())
}

func checkImageState(st *pb.ImageState) error {
	if n := len(st.GetImages()); n > maxReportedImages {
		return fmt.Errorf("image state: %d images (max %d)", n, maxReportedImages)
	}
	for _, im := range st.GetImages() {
		if len(im.GetNames()) > maxImageNames || len(im.GetDiffIds()) > maxImageLayers || len(im.GetId()) > maxImageString {
			return fmt.Errorf("image state: image %.80q has too many names or layers", im.GetId())
		}
		for _, n := range append(im.GetNames(), im.GetDiffIds()...) {
			if len(n) > maxImageString {
				return fmt.Errorf("image state: name or layer id of %d bytes", len(n))
			}
		}
	}
	return nil
}

func (s *Server) imageResolver() *imageresolve.Resolver {
	s.resolveOnce.Do(func() {
		s.resolver = &imageresolve.Resolver{Registries: s.cfg.ResolveRegistries}
	})
	return s.resolver
}

// resolveImages resolves each distinct image of a deploy, waiting at most
// ResolveWait for the ones not cached yet (dependency-aware scheduling §5.2: resolution off
// the critical path; a late one serves the next deploy).
func (s *Server) resolveImages(images []string) map[string]*placementpkg.ImageDeps {
	wait := s.cfg.ResolveWait
	if wait <= 0 {
		wait = 500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(s.ctx, wait)
	defer cancel()
	out := map[string]*placementpkg.ImageDeps{}
	for _, im := range images {
		if _, ok := out[im]; ok {
			continue
		}
		d, err := s.imageResolver().Resolve(ctx, im)
		if err != nil && !errors.Is(err, imageresolve.ErrNotAllowed) {
			s.rl.Warn("resolve:"+im, "image not resolved to layers; placing by name only", "image", im, "err", err)
		}
		out[im] = d
	}
	return out
}

// placementProfile is the deployer's profile: the configured dependency-aware
// scheduling policy, or the default (replicas spread first, then the bytes of the
// request's layers already on the host, then the least loaded).
func (s *Server) placementProfile() (*placementpkg.Profile, error) {
	switch s.cfg.Placement {
	case "", "deployer":
		return placementpkg.DependencyDeployer(), nil
	}
	p, ok := placementpkg.DepProfile(s.cfg.Placement, rand.New(rand.NewSource(time.Now().UnixNano())))
	if !ok {
		return nil, fmt.Errorf("placement policy %q: want deployer or one of %v", s.cfg.Placement, placementpkg.Policies)
	}
	return p, nil
}
