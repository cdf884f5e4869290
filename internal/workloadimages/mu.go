package workloadimages

// MuFunction is a Mu function replica: the queue proxy as the
// entrypoint, supervising demo-http as its child (the sidecar process
// shares the replica's cgroup, so its CPU is charged to the function's
// budget, and it starts and dies with it). Name carries the mu- prefix of
// the resources the Mu work creates on the shared engine.
var MuFunction = Spec{
	Name: "mu-fn",
	Fill: func(root string, r *Rootfs) error {
		if err := goFill("controller/cmd/escra-queue-proxy", "/escra-queue-proxy")(root, r); err != nil {
			return err
		}
		return goFill("workloads/demo-http", "/demo-http")(root, r)
	},
	Changes: []string{`ENTRYPOINT ["/escra-queue-proxy"]`},
}
