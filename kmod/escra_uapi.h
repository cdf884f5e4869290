/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * Escra generic netlink interface, shared by escra.ko and escrad.
 *
 * The daemon watches cgroups (by cgroup v2 id). The socket that sent
 * ESCRA_CMD_WATCH owns the watch: only it can unwatch the cgroup, the
 * module sends the cgroup's OOM requests to it alone (unicast), only it
 * can answer them, and its watches are dropped when it is closed. One
 * telemetry record per CFS bandwidth period of each watched cgroup is
 * multicast on the "telemetry" group (CAP_SYS_ADMIN to join), and on a
 * kernel with throttle events one record, of another kind, when a watched
 * group throttles or nearly does inside a period. The daemon
 * answers an OOM request with ESCRA_CMD_OOM_REPLY; until then (or a
 * timeout) the faulting task waits at the end of its page fault.
 *
 * The Go side keeps the same numbers in daemon/source/kmod/abi.go; a test there
 * parses this file and fails when the two disagree.
 */
#ifndef _UAPI_LINUX_ESCRA_H
#define _UAPI_LINUX_ESCRA_H

#define ESCRA_GENL_NAME		"escra"
#define ESCRA_GENL_VERSION	2

#define ESCRA_MCGRP_TELEMETRY	"telemetry"

enum escra_cmd {
	ESCRA_CMD_UNSPEC,
	ESCRA_CMD_WATCH,	/* admin: start reporting a cgroup, owned by the sender */
	ESCRA_CMD_UNWATCH,	/* admin, owner only: stop reporting a cgroup */
	ESCRA_CMD_OOM_REPLY,	/* admin, owner only: verdict for an OOM request */
	ESCRA_CMD_GET_STATS,	/* read module counters */
	ESCRA_CMD_TELEMETRY,	/* event: nested ESCRA_A_RECORD list */
	ESCRA_CMD_OOM_REQUEST,	/* event, unicast to the owner: one blocked fault */
	__ESCRA_CMD_MAX,
};
#define ESCRA_CMD_MAX (__ESCRA_CMD_MAX - 1)

enum escra_attr {
	ESCRA_A_UNSPEC,
	ESCRA_A_PAD,
	ESCRA_A_CGROUP_ID,	/* u64: cgroup v2 id (kernfs inode) */
	ESCRA_A_REQUEST_ID,	/* u64: OOM request id */
	ESCRA_A_GRANTED,	/* u8: 1 when memory.max was raised */
	ESCRA_A_RECORD,		/* nested escra_rec_attr, repeated */
	ESCRA_A_USAGE_BYTES,	/* u64: memcg usage at the failed charge */
	ESCRA_A_MAX_BYTES,	/* u64: memory.max at the failed charge */
	ESCRA_A_NR_PAGES,	/* u32: pages the charge wanted */
	ESCRA_A_STATS,		/* nested escra_stat_attr */
	__ESCRA_A_MAX,
};
#define ESCRA_A_MAX (__ESCRA_A_MAX - 1)

/*
 * One CFS bandwidth period of one cgroup (Escra §IV-B), or an event inside
 * the period that follows record SEQ: KIND says which. An event carries
 * CGROUP_ID, SEQ, QUOTA_NS, PERIOD_NS, USED_NS (so far), THROTTLED (1 for
 * a throttle), NR_THROTTLED and TIMESTAMP_NS (when it happened).
 */
enum escra_rec_kind {
	ESCRA_REC_KIND_PERIOD,	/* the period ended (absent KIND means this) */
	ESCRA_REC_KIND_THROTTLE,	/* a cfs_rq was throttled */
	ESCRA_REC_KIND_NEAR,	/* runtime left fell to throttle_near_permille */
};

enum escra_rec_attr {
	ESCRA_REC_UNSPEC,
	ESCRA_REC_PAD,
	ESCRA_REC_CGROUP_ID,	/* u64 */
	ESCRA_REC_SEQ,		/* u64: per-cgroup period counter */
	ESCRA_REC_QUOTA_NS,	/* u64 */
	ESCRA_REC_PERIOD_NS,	/* u64 */
	ESCRA_REC_UNUSED_NS,	/* u64: runtime left at the period's end */
	ESCRA_REC_THROTTLED,	/* u8: throttled at some time in the period */
	ESCRA_REC_NR_THROTTLED,	/* u32: cumulative, as of the previous boundary */
	ESCRA_REC_THROTTLED_NS,	/* u64: cumulative, added when a throttle ends */
	ESCRA_REC_TIMESTAMP_NS,	/* u64: CLOCK_MONOTONIC at the period boundary */
	ESCRA_REC_USED_NS,	/* u64: runtime consumed in the period (burst-safe) */
	ESCRA_REC_KIND,		/* u8: enum escra_rec_kind, events only */
	__ESCRA_REC_MAX,
};
#define ESCRA_REC_MAX (__ESCRA_REC_MAX - 1)

/* Module counters returned by ESCRA_CMD_GET_STATS. */
enum escra_stat_attr {
	ESCRA_STAT_UNSPEC,
	ESCRA_STAT_PAD,
	ESCRA_STAT_WATCHED,		/* u32 */
	ESCRA_STAT_RECORDS_SENT,	/* u64 */
	ESCRA_STAT_RECORDS_DROPPED,	/* u64: ring full, or no listener took them */
	ESCRA_STAT_OOM_REQUESTS,	/* u64 */
	ESCRA_STAT_OOM_GRANTED,		/* u64 */
	ESCRA_STAT_OOM_TIMEOUTS,	/* u64 */
	ESCRA_STAT_HOOK_NS_TOTAL,	/* u64: local_clock() time in the CFS hook */
	ESCRA_STAT_HOOK_CALLS,		/* u64 */
	ESCRA_STAT_WATCHES_RELEASED,	/* u64: dropped as their owner closed */
	ESCRA_STAT_OOM_UNSENT,		/* u64: requests the owner could not get */
	ESCRA_STAT_DRAIN_NS_TOTAL,	/* u64: local_clock() time in the drain work */
	ESCRA_STAT_EVENTS,		/* u64: throttle and near events queued */
	__ESCRA_STAT_MAX,
};
#define ESCRA_STAT_MAX (__ESCRA_STAT_MAX - 1)

#endif /* _UAPI_LINUX_ESCRA_H */
