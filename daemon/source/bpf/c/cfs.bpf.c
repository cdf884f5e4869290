// SPDX-License-Identifier: GPL-2.0
/*
 * escrad's bpf backend: Escra §IV-B's per-period CFS record on a stock
 * kernel with BTF, in place of the escra.ko period hook.
 *
 * The hrtimer_expire_entry tracepoint fires before a timer's callback
 * runs. For a group's CFS bandwidth period timer (the callback is
 * sched_cfs_period_timer) the ending period's state is then still in
 * cfs_b, before do_sched_cfs_period_timer() refills it, so one record per
 * period and watched group goes to the ring buffer: quota, period, the
 * runtime left in the global pool, the cumulative throttle counters and
 * whether the group was throttled in the period. tp_btf needs no fentry
 * trampoline, which some kernels refuse (this project's host does).
 *
 * A group about to run out of quota is sent at once too (a near record,
 * like the cgroupfs backend's --throttle-near poll): at sched_switch
 * away from one of its tasks, when the runtime left is at most
 * (1 - near_permille/1000) of the quota. The controller raises the quota
 * before the group throttles instead of one round trip after.
 *
 * A throttle is also sent at once, the first of a period and the first
 * after each raise (a throttle record, escrad's CpuStat.mid_period): a
 * raise that runs out before the period ends needs another one, and the
 * controller cannot see that from the period record that comes after
 * the group waited. sched_switch away from a task
 * whose cfs_rq is throttled is where a throttle first shows without an
 * fexit on throttle_cfs_rq() (a throttled task is switched out at once
 * on 6.1, on its way back to user space since 6.18).
 *
 * "Throttled in the period" is not taken from nr_throttled, which the
 * timer bumps after this point and which would mark the next period too
 * (a period's record must say whether that period throttled). It is a
 * flag per group: set when cfs_rqs are still throttled when the period
 * timer's callback returns (the new period starts throttled), when the
 * slack timer fires with cfs_rqs throttled (released within the period)
 * or when a throttled task is switched out; reported and cleared at the
 * next period boundary, or-ed with "throttled at the boundary".
 *
 * The group is the cpu controller's task_group, so the cgroup id comes
 * from whichever hierarchy the cpu controller is mounted on (v1 or v2):
 * one id space, no v1/v2 collision (item 5). Readers key groups by the
 * inode of the cpu controller's directory.
 */
#include "cfs.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define RUNTIME_INF ((u64)~0ULL)

/*
 * Records are submitted without waking the reader, which drains the ring
 * on its own short timer: one wake-up for many groups' records instead of
 * one per record (their period timers all have their own phase). A ring
 * this full wakes it at once.
 */
#define WAKE_BYTES (256 << 10)

/* Callback addresses from /proc/kallsyms, set by the loader. */
volatile const u64 period_timer_fn;
volatile const u64 slack_timer_fn;

/* Near-throttle threshold in 1/1000 of the quota (0: off); escrad writes it after load. */
volatile u32 near_permille;

enum escra_rec_kind {
	ESCRA_REC_PERIOD = 0,		/* a period ended */
	ESCRA_REC_THROTTLE = 1,		/* first throttle of a period and quota */
	ESCRA_REC_NEAR = 2,		/* runtime nearly used up within a period */
};

/* One ring buffer record; daemon/source/bpf decodes it by these offsets. */
struct escra_rec {
	u64 cgroup_id;
	u64 ts_ns;		/* ktime (CLOCK_MONOTONIC) */
	u64 quota_ns;
	u64 period_ns;
	u64 unused_ns;		/* runtime left in the global pool */
	u64 throttled_ns;	/* cumulative throttled_time */
	u32 nr_throttled;	/* cumulative */
	u8 throttled;		/* throttled in the period */
	u8 kind;		/* enum escra_rec_kind */
	u8 pad[2];
};

/* Per watched group; the key is the cgroup id. */
struct escra_group {
	u32 throttled;		/* throttled in the period in progress */
	u32 near_quota_us;	/* quota a near record was sent at this period (0: none) */
	u32 throttle_quota_us;	/* quota a throttle record was sent at this period (0: none) */
	u32 pad;
};

struct escra_stats {
	u64 periods;		/* period records written */
	u64 throttles;		/* throttle records written */
	u64 nears;		/* near records written */
	u64 dropped;		/* ring buffer full */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, struct escra_group);
} watched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct escra_stats);
} stats SEC(".maps");

/* Puts struct escra_rec in BTF, for bpf2go -type. */
const struct escra_rec *unused_rec __attribute__((unused));

/* container_of() with offsets relocated against the running kernel. */
static __always_inline u64 cfs_b_cgroup_id(struct cfs_bandwidth *cfs_b)
{
	struct task_group *tg = (void *)cfs_b -
		bpf_core_field_offset(struct task_group, cfs_bandwidth);

	return BPF_CORE_READ(tg, css.cgroup, kn, id);
}

/* !list_empty(&cfs_b->throttled_cfs_rq), read without cfs_b->lock. */
static __always_inline bool cfs_b_throttled(struct cfs_bandwidth *cfs_b)
{
	void *head = (void *)cfs_b +
		bpf_core_field_offset(struct cfs_bandwidth, throttled_cfs_rq);

	return (void *)BPF_CORE_READ(cfs_b, throttled_cfs_rq.next) != head;
}

/* The group of a CFS bandwidth timer, or NULL for any other timer. */
static __always_inline struct cfs_bandwidth *
timer_group(struct hrtimer *t, u64 *id, struct escra_group **g, bool *slack)
{
	/* Runs for every hrtimer of the host: a direct (BTF) load, no helper. */
	u64 fn = (u64)t->function;
	struct cfs_bandwidth *cfs_b;

	if (fn == period_timer_fn) {
		cfs_b = (void *)t - bpf_core_field_offset(struct cfs_bandwidth, period_timer);
		*slack = false;
	} else if (fn == slack_timer_fn) {
		cfs_b = (void *)t - bpf_core_field_offset(struct cfs_bandwidth, slack_timer);
		*slack = true;
	} else {
		return NULL;
	}
	*id = cfs_b_cgroup_id(cfs_b);
	*g = bpf_map_lookup_elem(&watched, id);
	return *g ? cfs_b : NULL;
}

static __always_inline void fill(struct escra_rec *r, struct cfs_bandwidth *cfs_b,
				 u64 id, u8 kind)
{
	r->cgroup_id = id;
	r->ts_ns = bpf_ktime_get_ns();
	r->quota_ns = BPF_CORE_READ(cfs_b, quota);
	r->period_ns = BPF_CORE_READ(cfs_b, period);
	r->unused_ns = BPF_CORE_READ(cfs_b, runtime);
	r->throttled_ns = BPF_CORE_READ(cfs_b, throttled_time);
	r->nr_throttled = BPF_CORE_READ(cfs_b, nr_throttled);
	r->throttled = 0;
	r->kind = kind;
	r->pad[0] = r->pad[1] = 0;
}

/* A filled record of this kind, or NULL when the ring is full (counted). */
static __always_inline struct escra_rec *
reserve(struct cfs_bandwidth *cfs_b, u64 id, u8 kind, struct escra_stats **stp)
{
	struct escra_stats *st;
	struct escra_rec *r;
	u32 zero = 0;

	st = bpf_map_lookup_elem(&stats, &zero);
	if (!st)
		return NULL;
	r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&st->dropped, 1);
		return NULL;
	}
	fill(r, cfs_b, id, kind);
	*stp = st;
	return r;
}

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(escra_timer_entry, struct hrtimer *timer, ktime_t *now)
{
	struct cfs_bandwidth *cfs_b;
	struct escra_stats *st;
	struct escra_group *g;
	struct escra_rec *r;
	bool slack;
	u64 id;

	cfs_b = timer_group(timer, &id, &g, &slack);
	if (!cfs_b)
		return 0;
	if (slack) {
		/* Slack is about to release cfs_rqs throttled in this period. */
		if (cfs_b_throttled(cfs_b))
			g->throttled = 1;
		return 0;
	}
	g->near_quota_us = 0;
	g->throttle_quota_us = 0;
	if (BPF_CORE_READ(cfs_b, quota) == RUNTIME_INF)
		return 0;
	r = reserve(cfs_b, id, ESCRA_REC_PERIOD, &st);
	if (!r)
		return 0;
	r->throttled = g->throttled || cfs_b_throttled(cfs_b);
	g->throttled = 0;
	bpf_ringbuf_submit(r, bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) >= WAKE_BYTES ?
			   BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	__sync_fetch_and_add(&st->periods, 1);
	return 0;
}

/*
 * cfs_rqs still throttled after the refill: the new period starts
 * throttled. The refill hands runtime to every throttled cfs_rq until it
 * runs out, but unthrottles those of other CPUs asynchronously (by IPI,
 * since 6.0): they stay on the throttled list for a moment after the
 * callback. So the list counts only when the refill ran out of runtime.
 */
SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(escra_timer_exit, struct hrtimer *timer)
{
	struct cfs_bandwidth *cfs_b;
	struct escra_group *g;
	bool slack;
	u64 id;

	cfs_b = timer_group(timer, &id, &g, &slack);
	if (cfs_b && !slack && cfs_b_throttled(cfs_b) && !BPF_CORE_READ(cfs_b, runtime))
		g->throttled = 1;
	return 0;
}

/*
 * A near record for prev's group when the runtime left in the period is
 * at most (1 - near_permille/1000) of the quota. Left is the global pool
 * plus this CPU's slice; slices other CPUs hold are not seen, so a group
 * spread over CPUs is sent early, never late. Once per period and quota:
 * a raise refills the runtime, and a new quota may be sent again.
 */
static __always_inline int near_check(struct cfs_rq *cfs_rq)
{
	struct cfs_bandwidth *cfs_b;
	struct escra_stats *st;
	struct task_group *tg;
	struct escra_group *g;
	struct escra_rec *r;
	u64 quota, left, id;
	u32 near = near_permille;
	s64 local;

	if (!near || near > 1000 || !cfs_rq->runtime_enabled)
		return 0;
	tg = cfs_rq->tg;
	if (!tg)
		return 0;
	cfs_b = (void *)tg + bpf_core_field_offset(struct task_group, cfs_bandwidth);
	quota = BPF_CORE_READ(cfs_b, quota);
	if (!quota || quota == RUNTIME_INF)
		return 0;
	left = BPF_CORE_READ(cfs_b, runtime);
	local = cfs_rq->runtime_remaining;
	if (local > 0)
		left += local;
	if (left * 1000 > (u64)(1000 - near) * quota)
		return 0;
	id = BPF_CORE_READ(tg, css.cgroup, kn, id);
	g = bpf_map_lookup_elem(&watched, &id);
	if (!g || g->throttle_quota_us == (u32)(quota / 1000) ||
	    g->near_quota_us == (u32)(quota / 1000))
		return 0;
	g->near_quota_us = quota / 1000;
	r = reserve(cfs_b, id, ESCRA_REC_NEAR, &st);
	if (!r)
		return 0;
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	__sync_fetch_and_add(&st->nears, 1);
	return 0;
}

/*
 * Runs at every context switch of the host, so the common case is two
 * direct loads: prev's cfs_rq and its throttle_count (non-zero while it
 * or an ancestor is throttled); for a task under a quota, two more reads
 * of the runtime left (near_check). Only then is the map looked up.
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(escra_switch, bool preempt, struct task_struct *prev)
{
	struct cfs_rq *cfs_rq = prev->se.cfs_rq;
	struct cfs_bandwidth *cfs_b;
	struct escra_stats *st;
	struct task_group *tg;
	struct escra_group *g;
	struct escra_rec *r;
	u32 quota_us;
	u64 id;

	if (!cfs_rq)
		return 0;
	if (cfs_rq->throttle_count <= 0)
		return near_check(cfs_rq);
	if (!BPF_CORE_READ_BITFIELD_PROBED(cfs_rq, throttled))
		return 0;
	tg = BPF_CORE_READ(cfs_rq, tg);
	id = BPF_CORE_READ(tg, css.cgroup, kn, id);
	g = bpf_map_lookup_elem(&watched, &id);
	if (!g)
		return 0;
	cfs_b = (void *)tg + bpf_core_field_offset(struct task_group, cfs_bandwidth);
	quota_us = BPF_CORE_READ(cfs_b, quota) / 1000;
	g->throttled = 1;
	/*
	 * Once per period and quota: a raise that did not last the period
	 * (the pool was short, or the burst outgrew it) is followed by
	 * another record when the group runs out again.
	 */
	if (g->throttle_quota_us == quota_us)
		return 0;
	g->throttle_quota_us = quota_us;
	r = reserve(cfs_b, id, ESCRA_REC_THROTTLE, &st);
	if (!r)
		return 0;
	r->throttled = 1;
	/* Worth a wake-up: escrad may raise the quota within the period. */
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	__sync_fetch_and_add(&st->throttles, 1);
	return 0;
}
