package agent

import (
	"context"
	"sort"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Image and layer state (dependency-aware scheduling §4.2–4.3, §5: the kubelet's part): what
// the engine's image store holds goes to the controller after every
// connect and after image events, so the deployer can place a container
// where its layers already are. With --image-budget the store is kept
// under a byte budget by removing the least recently used images no
// container uses (Docker evicts only whole images, §4.4).

type imageTracker struct {
	mu      sync.Mutex
	state   *pb.ImageState
	lastUse map[string]time.Time // image id -> last container created from it
	kick    chan struct{}
}

func newImageTracker() *imageTracker {
	return &imageTracker{lastUse: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// ImageState implements link.ImageReporter: the last state read (nil
// before the first read).
func (a *Agent) ImageState() *pb.ImageState {
	a.img.mu.Lock()
	defer a.img.mu.Unlock()
	return a.img.state
}

// touchImage records a use of an image (LRU order) and asks for a refresh.
func (a *Agent) touchImage(ref string) {
	if a.cfg.Docker == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ins, err := a.cfg.Docker.ImageInspect(ctx, ref); err == nil {
		a.img.mu.Lock()
		a.img.lastUse[ins.ID] = time.Now()
		a.img.mu.Unlock()
	}
	select {
	case a.img.kick <- struct{}{}:
	default:
	}
}

// imageLoop watches image events and refreshes the state, coalescing a
// burst of events (a pull of 12 layers) into one refresh.
func (a *Agent) imageLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := a.imageSession(ctx)
		if ctx.Err() != nil {
			return
		}
		a.log.Debug("image events: engine unavailable; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (a *Agent) imageSession(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	evs := a.cfg.Docker.Events(ctx, client.EventsListOptions{Filters: make(client.Filters).Add("type", "image")})
	msgs, errs := evs.Messages, evs.Err
	refresh := time.NewTimer(0) // read the state once at the start
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-msgs:
			refresh.Reset(200 * time.Millisecond)
		case <-a.img.kick:
			refresh.Reset(50 * time.Millisecond)
		case <-refresh.C:
			if err := a.refreshImages(ctx); err != nil {
				a.log.Warn("image state: reading the engine's images failed", "err", err)
				refresh.Reset(5 * time.Second)
			}
		}
	}
}

// refreshImages reads the store, evicts down to the budget, and sends the
// state to the controller.
func (a *Agent) refreshImages(ctx context.Context) error {
	st, err := a.readImages(ctx)
	if err != nil {
		return err
	}
	if b := a.cfg.ImageBudget; b > 0 && st.StoreBytes > b {
		if n := a.evictImages(ctx, st); n > 0 {
			if st, err = a.readImages(ctx); err != nil {
				return err
			}
		}
	}
	a.img.mu.Lock()
	a.img.state = st
	a.img.mu.Unlock()
	if err := a.link.SendImageState(st); err != nil {
		a.log.Debug("image state not sent (it goes with the next connect)", "err", err)
	}
	return nil
}

func (a *Agent) readImages(ctx context.Context) (*pb.ImageState, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := a.cfg.Docker.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		return nil, err
	}
	st := &pb.ImageState{BudgetBytes: a.cfg.ImageBudget}
	for _, s := range list.Items {
		ins, err := a.cfg.Docker.ImageInspect(ctx, s.ID)
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				continue // removed meanwhile
			}
			return nil, err
		}
		info := &pb.ImageInfo{Id: ins.ID, SizeBytes: ins.Size}
		info.Names = append(append(info.Names, ins.RepoTags...), ins.RepoDigests...)
		if ins.RootFS.Type == "layers" {
			info.DiffIds = ins.RootFS.Layers
		}
		st.Images = append(st.Images, info)
	}
	du, err := a.cfg.Docker.DiskUsage(ctx, client.DiskUsageOptions{Images: true})
	if err != nil {
		return nil, err
	}
	st.StoreBytes = du.Images.TotalSize
	return st, nil
}

// evictImages removes least recently used images no container uses until
// the store fits its budget; it returns how many it removed. An image
// escrad never saw used counts as older than any it did (by creation
// time among themselves).
func (a *Agent) evictImages(ctx context.Context, st *pb.ImageState) int {
	cs, err := a.cfg.Docker.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		a.log.Warn("image budget: listing containers failed", "err", err)
		return 0
	}
	inUse := map[string]bool{}
	for _, c := range cs.Items {
		inUse[c.ImageID] = true
	}
	a.img.mu.Lock()
	type cand struct {
		id   string
		last time.Time
		size int64
	}
	var cands []cand
	for _, im := range st.Images {
		if !inUse[im.Id] {
			cands = append(cands, cand{im.Id, a.img.lastUse[im.Id], im.SizeBytes})
		}
	}
	a.img.mu.Unlock()
	sort.Slice(cands, func(i, j int) bool {
		if !cands[i].last.Equal(cands[j].last) {
			return cands[i].last.Before(cands[j].last)
		}
		return cands[i].id < cands[j].id
	})
	over := st.StoreBytes - a.cfg.ImageBudget
	n := 0
	for _, c := range cands {
		if over <= 0 {
			break
		}
		if _, err := a.cfg.Docker.ImageRemove(ctx, c.id, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
			a.log.Warn("image budget: remove failed", "image", short(c.id), "err", err)
			continue
		}
		a.log.Info("image budget: removed least recently used image", "image", short(c.id), "size", c.size, "over_by", over)
		a.img.mu.Lock()
		delete(a.img.lastUse, c.id)
		a.img.mu.Unlock()
		// Shared layers may stay: the next read measures what was freed.
		over -= c.size
		n++
	}
	return n
}
