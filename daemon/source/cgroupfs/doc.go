// Package cgroupfs is escrad's stock-kernel backend: it samples every
// watched group's cgroup files once per period (source.go, sample.go,
// parent.go; throttle events between periods in throttle.go), and traps a
// container's out-of-memory moment so the controller can grant memory
// before anything is killed (Escra §III "OOM-preventing kernel event",
// §IV-B): trap.go (the Watcher), trapv1.go, brake.go. The guard
// (guard.go, guardchild.go, restore.go) clears the traps when escrad dies.
// The bpf backend uses the same OOM trap.
//
// cgroup v1: memory.oom_control's oom_kill_disable is set, so a task that
// hits the limit sleeps instead of being killed, and an eventfd registered
// through cgroup.event_control wakes us. A grant raises the limit (the
// sleeping tasks retry and go on); a denial, or no verdict in time, clears
// oom_kill_disable so the kernel OOM killer runs as usual: never hung.
// Once the group is out of the OOM state again (the killer took a task, or
// the task freed memory) and the container lives on, the trap is set again
// (Maintain), so its next OOM is a request again, not a plain kill.
//
// cgroup v2 has no oom_kill_disable: memory.high is kept a margin below
// memory.max (the brake) and an increment of "high" in memory.events
// (polled: kernfs signals EPOLLPRI when a cgroup file's event count moves,
// no inotify needed) asks for memory early. Tasks over memory.high are
// reclaimed from and throttled (a penalty sleep per return to user space,
// growing with the overage), not stopped. A grant raises memory.max and the
// brake with it. A denial or a missed deadline releases the brake
// (memory.high = max): the tasks run at full speed to memory.max, where the
// kernel OOM killer acts as usual, or finish if they fit. The brake is set
// again at the next memory.max write, after an OOM kill in the group, or
// once usage is two margins below memory.max (Maintain). See docs/daemon.md.
package cgroupfs
