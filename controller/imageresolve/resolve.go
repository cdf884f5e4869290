// Package imageresolve maps an image name to its layers for dependency
// placement (dependency-aware scheduling §4.3 and §5.2 "image resolution"): the name is
// normalised as Docker does (§4.2), the registry's manifest gives the
// layers' digests and sizes and its config the uncompressed diff-ids that
// engines report, and the result is cached so that resolution is paid
// once per image, off the placement path.
package imageresolve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"

	"github.com/escra-dev/escra/controller/placement"
)

// Normalize returns Docker's full form of an image reference: the
// implicit docker.io registry and library/ namespace, and :latest when
// neither tag nor digest is given ("busybox" → "docker.io/library/busybox:latest").
func Normalize(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

// Media types of the manifests the resolver reads.
const (
	mtDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mtDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mtOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mtOCIIndex       = "application/vnd.oci.image.index.v1+json"
)

// Resolver resolves and caches. Only registries named in Registries are
// ever contacted (over plain HTTP: they are loopback registries such as
// Debian's docker-registry on 127.0.0.1:5000); any other name resolves to
// its normalised name alone, which image-match can still use.
type Resolver struct {
	Registries []string
	// TTL is how long a resolution is trusted (a tag can move); 0: 5 min.
	TTL    time.Duration
	Client *http.Client

	mu    sync.Mutex
	cache map[string]*entry
}

type entry struct {
	done chan struct{}
	deps *placement.ImageDeps
	err  error
	at   time.Time
}

// ErrNotAllowed is returned for an image whose registry is not in
// Registries.
var ErrNotAllowed = errors.New("registry not in the resolver's list")

// Resolve returns the image's layers, from the cache or the registry. A
// resolution already running is joined, not repeated. When ctx ends
// first, the resolution goes on in the background for the next caller.
func (r *Resolver) Resolve(ctx context.Context, ref string) (*placement.ImageDeps, error) {
	name, err := Normalize(ref)
	if err != nil {
		return nil, err
	}
	named, _ := reference.ParseNormalizedNamed(name)
	if !slices.Contains(r.Registries, reference.Domain(named)) {
		return &placement.ImageDeps{Name: name}, ErrNotAllowed
	}
	ttl := r.TTL
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string]*entry{}
	}
	e := r.cache[name]
	if e != nil {
		select {
		case <-e.done:
			if e.err != nil || time.Since(e.at) > ttl {
				e = nil
			}
		default:
		}
	}
	if e == nil {
		e = &entry{done: make(chan struct{})}
		r.cache[name] = e
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e.deps, e.err = r.fetch(ctx, named)
			e.at = time.Now()
			close(e.done)
		}()
	}
	r.mu.Unlock()
	select {
	case <-e.done:
		if e.err != nil {
			return &placement.ImageDeps{Name: name}, e.err
		}
		return e.deps, nil
	case <-ctx.Done():
		return &placement.ImageDeps{Name: name}, ctx.Err()
	}
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
	Manifests []descriptor `json:"manifests"`
}

// fetch reads the manifest (following a list to its linux/amd64 entry)
// and the config's rootfs.diff_ids.
func (r *Resolver) fetch(ctx context.Context, named reference.Named) (*placement.ImageDeps, error) {
	dom, path := reference.Domain(named), reference.Path(named)
	ref := "latest"
	if d, ok := named.(reference.Digested); ok {
		ref = d.Digest().String()
	} else if t, ok := named.(reference.Tagged); ok {
		ref = t.Tag()
	}
	base := "http://" + dom + "/v2/" + path
	var m manifest
	for hop := 0; ; hop++ {
		if err := r.get(ctx, base+"/manifests/"+ref, strings.Join([]string{mtDockerManifest, mtOCIManifest, mtDockerList, mtOCIIndex}, ", "), &m); err != nil {
			return nil, err
		}
		if len(m.Manifests) == 0 || hop > 0 {
			break
		}
		i := slices.IndexFunc(m.Manifests, func(d descriptor) bool {
			return d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == "amd64"
		})
		if i < 0 {
			return nil, fmt.Errorf("%s: no linux/amd64 image in its manifest list", named)
		}
		ref, m = m.Manifests[i].Digest, manifest{}
	}
	if m.Config.Digest == "" || len(m.Layers) == 0 {
		return nil, fmt.Errorf("%s: manifest without config or layers (media type %q)", named, m.MediaType)
	}
	var cfg struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := r.get(ctx, base+"/blobs/"+m.Config.Digest, "", &cfg); err != nil {
		return nil, err
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("%s: config lists %d diff-ids for %d layers", named, len(cfg.RootFS.DiffIDs), len(m.Layers))
	}
	d := &placement.ImageDeps{Name: named.String(), ID: m.Config.Digest, ChainIDs: placement.ChainIDs(cfg.RootFS.DiffIDs)}
	for i, l := range m.Layers {
		d.Layers = append(d.Layers, placement.Layer{DiffID: cfg.RootFS.DiffIDs[i], Size: l.Size})
		d.Size += l.Size
	}
	return d, nil
}

func (r *Resolver) get(ctx context.Context, url, accept string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	cl := r.Client
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	// Manifests and configs are small; a registry sending more is wrong.
	return json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(v)
}

// HostDeps turns a daemon's image report into what the dependency
// plugins read: normalised names and ids, diff-ids, chain ids. Names the
// engine reports that do not parse ("<none>:<none>") are skipped.
func HostDeps(images []ImageReport) *placement.HostDeps {
	h := placement.NewHostDeps()
	for _, im := range images {
		if im.ID != "" {
			h.Images[im.ID] = true
		}
		for _, n := range im.Names {
			if norm, err := Normalize(n); err == nil {
				h.Images[norm] = true
			}
		}
		for _, d := range im.DiffIDs {
			h.Layers[d] = true
		}
		for _, c := range placement.ChainIDs(im.DiffIDs) {
			h.Chains[c] = true
		}
	}
	return h
}

// ImageReport is one image as a daemon reports it (proto ImageInfo).
type ImageReport struct {
	ID      string
	Names   []string
	DiffIDs []string
}
