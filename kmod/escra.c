// SPDX-License-Identifier: GPL-2.0
/*
 * escra.ko: the kernel half of Escra's data path (the Escra paper, §IV-B).
 *
 * - CFS telemetry: the scheduler calls escra_cfs_period() at the end of
 *   every bandwidth period of each group with a quota (hard irq,
 *   cfs_b->lock held). For watched cgroups the record goes into a per-CPU
 *   single-producer ring (full ring: drop and count). An irq_work, then a
 *   delayed work (high-priority workqueue: it must keep up with CPU-bound
 *   groups), drain the rings into batched multicast messages on the
 *   "telemetry" group - the net/core/drop_monitor.c pattern, with irq_work
 *   so nothing here wakes a worker while the scheduler's locks are held.
 * - Throttle events (patch 4 of the series): when a watched group is
 *   throttled, or the runtime left in its pool falls to
 *   throttle_near_permille, the scheduler calls escra_cfs_event() (runqueue
 *   lock held, interrupts off) and the module puts a record of that kind
 *   into the same ring, so escrad can grant quota inside the period.
 * - OOM: in a user page fault, try_charge_memcg() calls escra_oom_ask()
 *   before the OOM kill, with the fault's locks held. For a watched
 *   cgroup the module unicasts a request to the socket that owns the
 *   watch and returns; the charge fails and, at the end of the fault with
 *   no locks held, escra_oom_wait() sleeps (killable, bounded by
 *   oom_timeout_ms) until ESCRA_CMD_OOM_REPLY arrives from that socket.
 *   Timeout, signal, unload or the owner closing mean "not granted": the
 *   memcg OOM killer runs.
 * - Owners: the socket that sends ESCRA_CMD_WATCH owns the watch (as
 *   taskstats keeps listeners per portid); NETLINK_URELEASE drops its
 *   watches and releases the tasks waiting for it.
 *
 * Built against a kernel without CONFIG_ESCRA_HOOKS (e.g. Debian's stock
 * headers) the module compiles to a stub whose init fails with
 * -EOPNOTSUPP, so the "escra" family never appears and escrad falls back
 * to its cgroupfs backend.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/kernel.h>

/* Kbuild defines ESCRA_HOOK_API when the kernel tree has linux/escra.h. */
#ifdef ESCRA_HOOK_API
#include <linux/escra.h>
#endif

#ifdef CONFIG_ESCRA_HOOKS

#include <linux/cgroup.h>
#include <linux/completion.h>
#include <linux/hashtable.h>
#include <linux/irq_work.h>
#include <linux/ktime.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/netlink.h>
#include <linux/notifier.h>
#include <linux/percpu.h>
#include <linux/sched/clock.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/u64_stats_sync.h>
#include <linux/workqueue.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>

#include "escra_uapi.h"

/* A faulting task waits at most this long, whatever the parameter says. */
#define ESCRA_OOM_TIMEOUT_MAX_MS	30000

static int escra_set_oom_timeout(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, ESCRA_OOM_TIMEOUT_MAX_MS);
}

static const struct kernel_param_ops escra_oom_timeout_ops = {
	.set	= escra_set_oom_timeout,
	.get	= param_get_uint,
};

static unsigned int oom_timeout_ms = 100;
module_param_cb(oom_timeout_ms, &escra_oom_timeout_ops, &oom_timeout_ms, 0644);
MODULE_PARM_DESC(oom_timeout_ms, "how long a faulting task waits for a verdict (1..30000 ms, default 100)");

static unsigned int drain_delay_ms = 2;
module_param(drain_delay_ms, uint, 0644);
MODULE_PARM_DESC(drain_delay_ms, "batching delay before telemetry is sent (ms, default 2)");

#ifdef ESCRA_HAS_CFS_EVENTS
static int escra_set_near(const char *val, const struct kernel_param *kp)
{
	int err = param_set_uint_minmax(val, kp, 0, 999);

	if (!err)
		escra_set_cfs_near(*(unsigned int *)kp->arg);
	return err;
}

static const struct kernel_param_ops escra_near_ops = {
	.set	= escra_set_near,
	.get	= param_get_uint,
};

/* 950: Escra's sub-period reaction acts when 95 % of the quota is gone. */
static unsigned int throttle_near_permille = 950;
module_param_cb(throttle_near_permille, &escra_near_ops, &throttle_near_permille, 0644);
MODULE_PARM_DESC(throttle_near_permille, "send a near-throttle event once this share of the quota is used (0..999 permille, 0: off, default 950)");
#endif

#define ESCRA_RING_SIZE		256	/* records per CPU, power of two */
#define ESCRA_MAX_WATCHED	4096
#define ESCRA_HASH_BITS		8

/* One period, or one event, of one cgroup, as copied out of the scheduler. */
struct escra_rec {
	u64 cgroup_id;
	u64 seq;
	u64 quota_ns;
	u64 period_ns;
	u64 unused_ns;
	u64 used_ns;
	u64 throttled_ns;
	u64 timestamp_ns;
	u32 nr_throttled;
	u8 throttled;
	u8 kind;	/* enum escra_rec_kind */
};

/*
 * Per-CPU ring. The producers are the CFS hooks on this CPU, the period
 * hook in hard irq and the event hook with interrupts off, so they never
 * nest; the consumer is the drain work (one at a time). head and tail
 * are free-running counters published with release/acquire. The counters
 * are written by the producer only; syncp keeps 32-bit readers untorn.
 */
struct escra_ring {
	struct escra_rec recs[ESCRA_RING_SIZE];
	unsigned int head;
	unsigned int tail;
	struct irq_work kick;
	struct u64_stats_sync syncp;
	u64_stats_t dropped;
	u64_stats_t hook_ns;
	u64_stats_t hook_calls;
	u64_stats_t events;
};

/* Allocated at init: too big for the module per-CPU reserve. */
static struct escra_ring __percpu *escra_rings;

struct escra_watch {
	struct hlist_node node;
	struct rcu_head rcu;
	u64 cgroup_id;
	u32 owner;	/* portid of the socket that watches; fixed */
	/* Touched only by the CFS hook, serialized by that group's cfs_b->lock. */
	u64 seq;
};

static DEFINE_HASHTABLE(escra_watched, ESCRA_HASH_BITS);
static DEFINE_MUTEX(escra_watch_mutex);
static unsigned int escra_nr_watched;

/*
 * An OOM request in flight: asked in the charge, waited for at the end of
 * the fault. The faulting task frees it; unload frees the ones no task
 * reached, and a request asked but never waited for expires.
 */
struct escra_oom_waiter {
	struct list_head node;
	u64 id;
	u32 owner;
	unsigned long expires;	/* jiffies */
	bool waiting;
	bool answered;
	bool granted;
	struct completion done;
};

static DEFINE_SPINLOCK(escra_oom_lock);
static LIST_HEAD(escra_oom_waiters);
static bool escra_unloading;

static atomic64_t escra_records_sent = ATOMIC64_INIT(0);
static atomic64_t escra_send_dropped = ATOMIC64_INIT(0);
static atomic64_t escra_oom_requests = ATOMIC64_INIT(0);
static atomic64_t escra_oom_granted = ATOMIC64_INIT(0);
static atomic64_t escra_oom_timeouts = ATOMIC64_INIT(0);
static atomic64_t escra_watches_released = ATOMIC64_INIT(0);
static atomic64_t escra_oom_unsent = ATOMIC64_INIT(0);
/* Time the drain work spends (one instance at a time, on a bound worker). */
static atomic64_t escra_drain_ns = ATOMIC64_INIT(0);

static struct genl_family escra_family;
static void escra_drain(struct work_struct *work);
static DECLARE_DELAYED_WORK(escra_drain_work, escra_drain);

enum escra_mcgrp { ESCRA_MCGRP_TELEMETRY_IDX };

/* Caller holds rcu_read_lock() or escra_watch_mutex. */
static struct escra_watch *escra_find_watch(u64 cgroup_id)
{
	struct escra_watch *w;

	hash_for_each_possible_rcu(escra_watched, w, node, cgroup_id,
				   lockdep_is_held(&escra_watch_mutex))
		if (w->cgroup_id == cgroup_id)
			return w;
	return NULL;
}

/* ---- telemetry: producer (scheduler hard irq) ---- */

static void escra_kick(struct irq_work *work)
{
	/*
	 * Outside cfs_b->lock now, so waking a worker cannot invert locks.
	 * Already pending: the queued drain will pick this record up too.
	 */
	queue_delayed_work(system_highpri_wq, &escra_drain_work,
			   msecs_to_jiffies(drain_delay_ms));
}

/* A free slot at the ring's head, or NULL (counted as dropped). */
static struct escra_rec *escra_ring_slot(struct escra_ring *ring)
{
	unsigned int head = ring->head;

	/* Pairs with the consumer's release of tail: the slot is free. */
	if (head - smp_load_acquire(&ring->tail) >= ESCRA_RING_SIZE) {
		u64_stats_update_begin(&ring->syncp);
		u64_stats_inc(&ring->dropped);
		u64_stats_update_end(&ring->syncp);
		return NULL;
	}
	return &ring->recs[head & (ESCRA_RING_SIZE - 1)];
}

static void escra_ring_publish(struct escra_ring *ring)
{
	/* Publish the record before the new head (acquired in escra_drain). */
	smp_store_release(&ring->head, ring->head + 1);
	irq_work_queue(&ring->kick);
}

static void escra_hook_account(struct escra_ring *ring, u64 start, bool event)
{
	u64_stats_update_begin(&ring->syncp);
	u64_stats_add(&ring->hook_ns, local_clock() - start);
	u64_stats_inc(&ring->hook_calls);
	if (event)
		u64_stats_inc(&ring->events);
	u64_stats_update_end(&ring->syncp);
}

static void escra_cfs_period(const struct escra_cfs_period *p)
{
	struct escra_ring *ring = this_cpu_ptr(escra_rings);
	/* local_clock: cheap; ktime (HPET under some VMs) only for the record. */
	u64 start = local_clock();
	struct escra_watch *w;
	struct escra_rec *r;

	/* Called under rcu_read_lock() by __escra_cfs_period(). */
	w = escra_find_watch(p->cgroup_id);
	if (!w)
		goto out;

	w->seq += p->overrun ? p->overrun : 1;
	r = escra_ring_slot(ring);
	if (!r)
		goto out;
	r->cgroup_id = p->cgroup_id;
	r->seq = w->seq;
	r->quota_ns = p->quota_ns;
	r->period_ns = p->period_ns;
	r->unused_ns = p->unused_ns;
	r->used_ns = p->used_ns;
	r->throttled_ns = p->throttled_ns;
	r->nr_throttled = p->nr_throttled;
	r->timestamp_ns = ktime_get_ns();
	/*
	 * The scheduler says whether the group was throttled in this
	 * period; the counters lag (nr_throttled and throttled_time move
	 * after the boundary) and would leak into the next one.
	 */
	r->throttled = p->throttled;
	r->kind = ESCRA_REC_KIND_PERIOD;
	escra_ring_publish(ring);
out:
	escra_hook_account(ring, start, false);
}

#ifdef ESCRA_HAS_CFS_EVENTS
/*
 * A throttle, or nearly one, inside the period after record w->seq. The
 * same cfs_b->lock that serializes the period hook is held, so w->seq is
 * stable; escrad names the period in progress from it.
 */
static void escra_cfs_event(const struct escra_cfs_event *e)
{
	struct escra_ring *ring = this_cpu_ptr(escra_rings);
	u64 start = local_clock();
	struct escra_watch *w;
	struct escra_rec *r;
	bool sent = false;

	/* Called under rcu_read_lock() by __escra_cfs_event(). */
	w = escra_find_watch(e->cgroup_id);
	if (!w)
		goto out;
	r = escra_ring_slot(ring);
	if (!r)
		goto out;
	*r = (struct escra_rec) {
		.cgroup_id	= e->cgroup_id,
		.seq		= w->seq,
		.quota_ns	= e->quota_ns,
		.period_ns	= e->period_ns,
		.used_ns	= e->used_ns,
		.nr_throttled	= e->nr_throttled,
		.timestamp_ns	= ktime_get_ns(),
		.throttled	= e->kind == ESCRA_CFS_THROTTLE,
		.kind		= e->kind == ESCRA_CFS_THROTTLE ?
				  ESCRA_REC_KIND_THROTTLE : ESCRA_REC_KIND_NEAR,
	};
	escra_ring_publish(ring);
	sent = true;
out:
	escra_hook_account(ring, start, sent);
}
#endif

/* ---- telemetry: consumer (process context) ---- */

static int escra_put_rec(struct sk_buff *skb, const struct escra_rec *r)
{
	struct nlattr *nest = nla_nest_start(skb, ESCRA_A_RECORD);

	if (!nest)
		return -EMSGSIZE;
	if (nla_put_u64_64bit(skb, ESCRA_REC_CGROUP_ID, r->cgroup_id, ESCRA_REC_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_REC_SEQ, r->seq, ESCRA_REC_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_REC_QUOTA_NS, r->quota_ns, ESCRA_REC_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_REC_PERIOD_NS, r->period_ns, ESCRA_REC_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_REC_UNUSED_NS, r->unused_ns, ESCRA_REC_PAD) ||
	    nla_put_u8(skb, ESCRA_REC_THROTTLED, r->throttled) ||
	    nla_put_u32(skb, ESCRA_REC_NR_THROTTLED, r->nr_throttled) ||
	    nla_put_u64_64bit(skb, ESCRA_REC_THROTTLED_NS, r->throttled_ns, ESCRA_REC_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_REC_TIMESTAMP_NS, r->timestamp_ns, ESCRA_REC_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_REC_USED_NS, r->used_ns, ESCRA_REC_PAD) ||
	    (r->kind && nla_put_u8(skb, ESCRA_REC_KIND, r->kind))) {
		nla_nest_cancel(skb, nest);
		return -EMSGSIZE;
	}
	nla_nest_end(skb, nest);
	return 0;
}

struct escra_batch {
	struct sk_buff *skb;
	void *hdr;
	unsigned int n;
};

static void escra_batch_send(struct escra_batch *b)
{
	int err;

	if (!b->skb)
		return;
	genlmsg_end(b->skb, b->hdr);
	err = genlmsg_multicast(&escra_family, b->skb, 0,
				ESCRA_MCGRP_TELEMETRY_IDX, GFP_KERNEL);
	/*
	 * -ESRCH also means every listener's socket was full: only with no
	 * listener left are the records simply not wanted.
	 */
	if (!err)
		atomic64_add(b->n, &escra_records_sent);
	else if (err != -ESRCH ||
		 genl_has_listeners(&escra_family, &init_net, ESCRA_MCGRP_TELEMETRY_IDX))
		atomic64_add(b->n, &escra_send_dropped);
	b->skb = NULL;
	b->n = 0;
}

static void escra_batch_add(struct escra_batch *b, const struct escra_rec *r)
{
	if (b->skb && escra_put_rec(b->skb, r) == 0) {
		b->n++;
		return;
	}
	escra_batch_send(b);
	b->skb = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	if (!b->skb)
		goto drop;
	b->hdr = genlmsg_put(b->skb, 0, 0, &escra_family, 0, ESCRA_CMD_TELEMETRY);
	if (!b->hdr || escra_put_rec(b->skb, r)) {
		nlmsg_free(b->skb);
		b->skb = NULL;
		goto drop;
	}
	b->n = 1;
	return;
drop:
	atomic64_inc(&escra_send_dropped);
}

static void escra_drain(struct work_struct *work)
{
	bool wanted = genl_has_listeners(&escra_family, &init_net,
					 ESCRA_MCGRP_TELEMETRY_IDX);
	u64 start = local_clock();
	struct escra_batch b = {};
	int cpu;

	for_each_possible_cpu(cpu) {
		struct escra_ring *ring = per_cpu_ptr(escra_rings, cpu);
		/* Pairs with the producer's release: records up to head are written. */
		unsigned int head = smp_load_acquire(&ring->head);
		unsigned int tail = ring->tail;

		for (; tail != head; tail++) {
			struct escra_rec r = ring->recs[tail & (ESCRA_RING_SIZE - 1)];

			/* Free the slot before the (possibly slow) send. */
			smp_store_release(&ring->tail, tail + 1);
			if (wanted)
				escra_batch_add(&b, &r);
		}
	}
	escra_batch_send(&b);
	atomic64_add(local_clock() - start, &escra_drain_ns);
}

/* ---- OOM ---- */

/* A request nobody waited for this long after it was asked is freed. */
#define ESCRA_OOM_STALE_MS	(ESCRA_OOM_TIMEOUT_MAX_MS + 1000)

static int escra_send_oom_request(u32 owner, u64 id, const struct escra_memcg_oom *req)
{
	struct sk_buff *skb;
	void *hdr;

	/* Small and atomic: we are inside a failing charge. */
	skb = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_NOWAIT | __GFP_NOWARN);
	if (!skb)
		return -ENOMEM;
	hdr = genlmsg_put(skb, 0, 0, &escra_family, 0, ESCRA_CMD_OOM_REQUEST);
	if (!hdr ||
	    nla_put_u64_64bit(skb, ESCRA_A_REQUEST_ID, id, ESCRA_A_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_A_CGROUP_ID, req->cgroup_id, ESCRA_A_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_A_USAGE_BYTES, req->usage_bytes, ESCRA_A_PAD) ||
	    nla_put_u64_64bit(skb, ESCRA_A_MAX_BYTES, req->max_bytes, ESCRA_A_PAD) ||
	    nla_put_u32(skb, ESCRA_A_NR_PAGES, req->nr_pages)) {
		nlmsg_free(skb);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	/* Never blocks: a full or closed owner socket fails the request. */
	return genlmsg_unicast(&init_net, skb, owner);
}

/* Caller holds escra_oom_lock. */
static struct escra_oom_waiter *escra_find_waiter(u64 id)
{
	struct escra_oom_waiter *w;

	list_for_each_entry(w, &escra_oom_waiters, node)
		if (w->id == id)
			return w;
	return NULL;
}

/* Caller holds escra_oom_lock. */
static void escra_prune_waiters(void)
{
	struct escra_oom_waiter *w, *tmp;

	list_for_each_entry_safe(w, tmp, &escra_oom_waiters, node) {
		if (!w->waiting && time_after(jiffies, w->expires)) {
			list_del(&w->node);
			kfree(w);
		}
	}
}

/* Charge context, locks held: must not sleep. */
static bool escra_oom_ask(u64 id, const struct escra_memcg_oom *req)
{
	struct escra_oom_waiter *w;
	struct escra_watch *watch;
	u32 owner = 0;

	rcu_read_lock();
	watch = escra_find_watch(req->cgroup_id);
	if (watch)
		owner = watch->owner;
	rcu_read_unlock();
	if (!owner)
		return false;

	w = kzalloc(sizeof(*w), GFP_NOWAIT | __GFP_NOWARN);
	if (!w)
		return false;
	w->id = id;
	w->owner = owner;
	w->expires = jiffies + msecs_to_jiffies(ESCRA_OOM_STALE_MS);
	init_completion(&w->done);

	spin_lock(&escra_oom_lock);
	if (escra_unloading) {
		spin_unlock(&escra_oom_lock);
		kfree(w);
		return false;
	}
	escra_prune_waiters();
	list_add_tail(&w->node, &escra_oom_waiters);
	spin_unlock(&escra_oom_lock);
	atomic64_inc(&escra_oom_requests);

	if (escra_send_oom_request(owner, id, req) == 0)
		return true;

	atomic64_inc(&escra_oom_unsent);
	spin_lock(&escra_oom_lock);
	list_del(&w->node);
	spin_unlock(&escra_oom_lock);
	kfree(w);
	return false;
}

/* End of the fault, no locks held. */
static bool escra_oom_wait(u64 id, bool wait)
{
	struct escra_oom_waiter *w;
	bool answered, granted;
	long left = 0;

	spin_lock(&escra_oom_lock);
	w = escra_find_waiter(id);
	if (w)
		w->waiting = true;	/* not pruned, not freed but by us */
	spin_unlock(&escra_oom_lock);
	if (!w)
		return false;	/* expired, or the module reloaded */

	if (wait)
		left = wait_for_completion_killable_timeout(&w->done,
				msecs_to_jiffies(READ_ONCE(oom_timeout_ms)));

	/* The replier completes under this lock. */
	spin_lock(&escra_oom_lock);
	list_del(&w->node);
	answered = w->answered;
	granted = w->granted;
	spin_unlock(&escra_oom_lock);
	kfree(w);

	if (!wait)
		return false;
	if (!answered)
		atomic64_inc(&escra_oom_timeouts);
	if (!answered || !granted || left <= 0)
		return false;
	atomic64_inc(&escra_oom_granted);
	return true;
}

static void escra_release_all_waiters(void)
{
	struct escra_oom_waiter *w;

	spin_lock(&escra_oom_lock);
	escra_unloading = true;
	list_for_each_entry(w, &escra_oom_waiters, node)
		complete(&w->done);
	spin_unlock(&escra_oom_lock);
}

/* After the hooks are gone no task can reach these any more. */
static void escra_free_all_waiters(void)
{
	struct escra_oom_waiter *w, *tmp;

	spin_lock(&escra_oom_lock);
	list_for_each_entry_safe(w, tmp, &escra_oom_waiters, node) {
		list_del(&w->node);
		kfree(w);
	}
	spin_unlock(&escra_oom_lock);
}

/*
 * The owner's socket is gone: drop its watches and answer "not granted"
 * to the tasks waiting for it, instead of letting them time out.
 */
static void escra_release_owner(u32 portid)
{
	struct escra_oom_waiter *ow;
	struct escra_watch *w;
	struct hlist_node *tmp;
	int bkt;

	mutex_lock(&escra_watch_mutex);
	hash_for_each_safe(escra_watched, bkt, tmp, w, node) {
		if (w->owner != portid)
			continue;
		hash_del_rcu(&w->node);
		escra_nr_watched--;
		kfree_rcu(w, rcu);
		atomic64_inc(&escra_watches_released);
	}
	mutex_unlock(&escra_watch_mutex);

	spin_lock(&escra_oom_lock);
	list_for_each_entry(ow, &escra_oom_waiters, node) {
		if (ow->owner != portid || ow->answered)
			continue;
		ow->answered = true;
		ow->granted = false;
		complete(&ow->done);
	}
	spin_unlock(&escra_oom_lock);
}

static int escra_netlink_notify(struct notifier_block *nb, unsigned long state,
				void *ptr)
{
	struct netlink_notify *n = ptr;

	if (state == NETLINK_URELEASE && n->protocol == NETLINK_GENERIC &&
	    net_eq(n->net, &init_net) && n->portid)
		escra_release_owner(n->portid);
	return NOTIFY_DONE;
}

static struct notifier_block escra_netlink_nb = {
	.notifier_call = escra_netlink_notify,
};

/* ---- generic netlink commands ---- */

/*
 * GENL_ADMIN_PERM asks for CAP_NET_ADMIN. Watching a cgroup takes its OOM
 * verdicts, which decide whether its tasks are killed, so the commands that
 * take or give them ask for CAP_SYS_ADMIN too, as joining the telemetry
 * group does.
 */
static bool escra_may_decide(const struct sk_buff *skb)
{
	return netlink_capable(skb, CAP_SYS_ADMIN);
}

static int escra_cmd_watch(struct sk_buff *skb, struct genl_info *info)
{
	struct escra_watch *w;
	struct cgroup *cgrp;
	u64 id;
	int err = 0;

	if (!escra_may_decide(skb))
		return -EPERM;

	if (GENL_REQ_ATTR_CHECK(info, ESCRA_A_CGROUP_ID))
		return -EINVAL;
	id = nla_get_u64(info->attrs[ESCRA_A_CGROUP_ID]);

	/* Only existing cgroup v2 cgroups (cgroup_get_from_id looks there). */
	cgrp = cgroup_get_from_id(id);
	if (IS_ERR(cgrp)) {
		GENL_SET_ERR_MSG(info, "no cgroup v2 cgroup with this id");
		return PTR_ERR(cgrp);
	}
	cgroup_put(cgrp);

	mutex_lock(&escra_watch_mutex);
	w = escra_find_watch(id);
	if (w) {
		/* Twice by the owner is fine; a closed owner's watches are gone. */
		if (w->owner != info->snd_portid) {
			GENL_SET_ERR_MSG(info, "cgroup is watched by another socket");
			err = -EBUSY;
		}
		goto out;
	}
	if (escra_nr_watched >= ESCRA_MAX_WATCHED) {
		GENL_SET_ERR_MSG(info, "too many watched cgroups");
		err = -ENOSPC;
		goto out;
	}
	w = kzalloc(sizeof(*w), GFP_KERNEL);
	if (!w) {
		err = -ENOMEM;
		goto out;
	}
	w->cgroup_id = id;
	w->owner = info->snd_portid;
	hash_add_rcu(escra_watched, &w->node, id);
	escra_nr_watched++;
out:
	mutex_unlock(&escra_watch_mutex);
	return err;
}

static int escra_cmd_unwatch(struct sk_buff *skb, struct genl_info *info)
{
	struct escra_watch *w;
	int err = 0;

	if (!escra_may_decide(skb))
		return -EPERM;

	if (GENL_REQ_ATTR_CHECK(info, ESCRA_A_CGROUP_ID))
		return -EINVAL;

	mutex_lock(&escra_watch_mutex);
	w = escra_find_watch(nla_get_u64(info->attrs[ESCRA_A_CGROUP_ID]));
	if (!w) {
		GENL_SET_ERR_MSG(info, "cgroup is not watched");
		err = -ENOENT;
	} else if (w->owner != info->snd_portid) {
		GENL_SET_ERR_MSG(info, "cgroup is watched by another socket");
		err = -EBUSY;
	} else {
		hash_del_rcu(&w->node);
		escra_nr_watched--;
		kfree_rcu(w, rcu);
	}
	mutex_unlock(&escra_watch_mutex);
	return err;
}

static int escra_cmd_oom_reply(struct sk_buff *skb, struct genl_info *info)
{
	struct escra_oom_waiter *w;
	int err = -ENOENT;
	u64 id;

	if (!escra_may_decide(skb))
		return -EPERM;

	if (GENL_REQ_ATTR_CHECK(info, ESCRA_A_REQUEST_ID) ||
	    GENL_REQ_ATTR_CHECK(info, ESCRA_A_GRANTED))
		return -EINVAL;
	id = nla_get_u64(info->attrs[ESCRA_A_REQUEST_ID]);

	spin_lock(&escra_oom_lock);
	list_for_each_entry(w, &escra_oom_waiters, node) {
		/* Only the socket the request went to may answer it. */
		if (w->id != id || w->answered || w->owner != info->snd_portid)
			continue;
		w->answered = true;
		w->granted = nla_get_u8(info->attrs[ESCRA_A_GRANTED]);
		complete(&w->done);
		err = 0;
		break;
	}
	spin_unlock(&escra_oom_lock);
	if (err)
		GENL_SET_ERR_MSG(info, "no pending OOM request with this id (timed out?)");
	return err;
}

static int escra_cmd_get_stats(struct sk_buff *skb, struct genl_info *info)
{
	u64 dropped = atomic64_read(&escra_send_dropped);
	u64 hook_ns = 0, hook_calls = 0, events = 0;
	struct nlattr *nest;
	struct sk_buff *msg;
	unsigned int watched;
	void *hdr;
	int cpu;

	for_each_possible_cpu(cpu) {
		struct escra_ring *ring = per_cpu_ptr(escra_rings, cpu);
		u64 d, ns, calls, ev;
		unsigned int start;

		do {
			start = u64_stats_fetch_begin(&ring->syncp);
			d = u64_stats_read(&ring->dropped);
			ns = u64_stats_read(&ring->hook_ns);
			calls = u64_stats_read(&ring->hook_calls);
			ev = u64_stats_read(&ring->events);
		} while (u64_stats_fetch_retry(&ring->syncp, start));
		dropped += d;
		hook_ns += ns;
		hook_calls += calls;
		events += ev;
	}
	mutex_lock(&escra_watch_mutex);
	watched = escra_nr_watched;
	mutex_unlock(&escra_watch_mutex);

	msg = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return -ENOMEM;
	hdr = genlmsg_put_reply(msg, info, &escra_family, 0, ESCRA_CMD_GET_STATS);
	if (!hdr)
		goto nospace;
	nest = nla_nest_start(msg, ESCRA_A_STATS);
	if (!nest ||
	    nla_put_u32(msg, ESCRA_STAT_WATCHED, watched) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_RECORDS_SENT,
			      atomic64_read(&escra_records_sent), ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_RECORDS_DROPPED, dropped, ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_OOM_REQUESTS,
			      atomic64_read(&escra_oom_requests), ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_OOM_GRANTED,
			      atomic64_read(&escra_oom_granted), ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_OOM_TIMEOUTS,
			      atomic64_read(&escra_oom_timeouts), ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_HOOK_NS_TOTAL, hook_ns, ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_HOOK_CALLS, hook_calls, ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_WATCHES_RELEASED,
			      atomic64_read(&escra_watches_released), ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_OOM_UNSENT,
			      atomic64_read(&escra_oom_unsent), ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_DRAIN_NS_TOTAL,
			      atomic64_read(&escra_drain_ns), ESCRA_STAT_PAD) ||
	    nla_put_u64_64bit(msg, ESCRA_STAT_EVENTS, events, ESCRA_STAT_PAD))
		goto nospace;
	nla_nest_end(msg, nest);
	genlmsg_end(msg, hdr);
	return genlmsg_reply(msg, info);
nospace:
	nlmsg_free(msg);
	return -EMSGSIZE;
}

/*
 * Strict policy: user space may send only the ids and the verdict; the
 * attributes the module emits are rejected on input.
 */
static const struct nla_policy escra_policy[ESCRA_A_MAX + 1] = {
	[ESCRA_A_PAD]		= { .type = NLA_REJECT },
	[ESCRA_A_CGROUP_ID]	= { .type = NLA_U64 },
	[ESCRA_A_REQUEST_ID]	= { .type = NLA_U64 },
	[ESCRA_A_GRANTED]	= NLA_POLICY_MAX(NLA_U8, 1),
	[ESCRA_A_RECORD]	= { .type = NLA_REJECT },
	[ESCRA_A_USAGE_BYTES]	= { .type = NLA_REJECT },
	[ESCRA_A_MAX_BYTES]	= { .type = NLA_REJECT },
	[ESCRA_A_NR_PAGES]	= { .type = NLA_REJECT },
	[ESCRA_A_STATS]		= { .type = NLA_REJECT },
};

static const struct genl_small_ops escra_ops[] = {
	{
		.cmd	= ESCRA_CMD_WATCH,
		.flags	= GENL_ADMIN_PERM,
		.doit	= escra_cmd_watch,
	},
	{
		.cmd	= ESCRA_CMD_UNWATCH,
		.flags	= GENL_ADMIN_PERM,
		.doit	= escra_cmd_unwatch,
	},
	{
		.cmd	= ESCRA_CMD_OOM_REPLY,
		.flags	= GENL_ADMIN_PERM,
		.doit	= escra_cmd_oom_reply,
	},
	{
		.cmd	= ESCRA_CMD_GET_STATS,
		.doit	= escra_cmd_get_stats,
	},
};

/* Telemetry tells about every watched cgroup: admins only, as drop_monitor. */
static const struct genl_multicast_group escra_mcgrps[] = {
	[ESCRA_MCGRP_TELEMETRY_IDX]	= { .name = ESCRA_MCGRP_TELEMETRY,
					    .flags = GENL_MCAST_CAP_SYS_ADMIN, },
};

static struct genl_family escra_family __ro_after_init = {
	.name		= ESCRA_GENL_NAME,
	.version	= ESCRA_GENL_VERSION,
	.maxattr	= ESCRA_A_MAX,
	.policy		= escra_policy,
	.module		= THIS_MODULE,
	.small_ops	= escra_ops,
	.n_small_ops	= ARRAY_SIZE(escra_ops),
	.resv_start_op	= ESCRA_CMD_MAX + 1,
	.mcgrps		= escra_mcgrps,
	.n_mcgrps	= ARRAY_SIZE(escra_mcgrps),
};

static const struct escra_hook_ops escra_hooks = {
	.cfs_period	= escra_cfs_period,
#ifdef ESCRA_HAS_CFS_EVENTS
	.cfs_event	= escra_cfs_event,
#endif
	.memcg_oom_ask	= escra_oom_ask,
	.memcg_oom_wait	= escra_oom_wait,
};

static void escra_free_watched(void)
{
	struct escra_watch *w;
	struct hlist_node *tmp;
	int bkt;

	mutex_lock(&escra_watch_mutex);
	hash_for_each_safe(escra_watched, bkt, tmp, w, node) {
		hash_del_rcu(&w->node);
		kfree_rcu(w, rcu);
	}
	escra_nr_watched = 0;
	mutex_unlock(&escra_watch_mutex);
}

static int __init escra_init(void)
{
	int cpu, err;

	escra_rings = alloc_percpu(struct escra_ring);
	if (!escra_rings)
		return -ENOMEM;
	for_each_possible_cpu(cpu) {
		struct escra_ring *ring = per_cpu_ptr(escra_rings, cpu);

		init_irq_work(&ring->kick, escra_kick);
		u64_stats_init(&ring->syncp);
	}

	err = genl_register_family(&escra_family);
	if (err)
		goto free_rings;
	err = netlink_register_notifier(&escra_netlink_nb);
	if (err)
		goto unregister_family;
	err = escra_register_hooks(&escra_hooks);
	if (err) {
		pr_err("cannot register hooks (%d): another module holds them\n", err);
		goto unregister_notifier;
	}
#ifdef ESCRA_HAS_CFS_EVENTS
	escra_set_cfs_near(throttle_near_permille);
#endif
	pr_info("loaded: genetlink family %s v%d, oom_timeout_ms=%u\n",
		ESCRA_GENL_NAME, ESCRA_GENL_VERSION, oom_timeout_ms);
	return 0;

unregister_notifier:
	netlink_unregister_notifier(&escra_netlink_nb);
unregister_family:
	genl_unregister_family(&escra_family);
free_rings:
	free_percpu(escra_rings);
	return err;
}

static void __exit escra_exit(void)
{
	int cpu;

	/* Waiters first: unregistering waits for hook calls in flight. */
	escra_release_all_waiters();
	escra_unregister_hooks(&escra_hooks);
	escra_free_all_waiters();
	for_each_possible_cpu(cpu)
		irq_work_sync(&per_cpu_ptr(escra_rings, cpu)->kick);
	cancel_delayed_work_sync(&escra_drain_work);
	netlink_unregister_notifier(&escra_netlink_nb);
	genl_unregister_family(&escra_family);
	escra_free_watched();
	rcu_barrier();	/* kfree_rcu callbacks run before the module text goes */
	free_percpu(escra_rings);
	pr_info("unloaded\n");
}

#else /* !CONFIG_ESCRA_HOOKS */

/*
 * A stock kernel has no hook to attach to. Refuse to load with a clear
 * message; the missing "escra" family is what escrad checks.
 */
static int __init escra_init(void)
{
	pr_err("this kernel lacks the Escra hooks (CONFIG_ESCRA_HOOKS, patches/linux-6.1); refusing to load\n");
	return -EOPNOTSUPP;
}

static void __exit escra_exit(void)
{
}

#endif /* CONFIG_ESCRA_HOOKS */

module_init(escra_init);
module_exit(escra_exit);

MODULE_DESCRIPTION("Escra per-period CFS telemetry and memcg OOM rescue over generic netlink");
MODULE_AUTHOR("Seed 0f09c13e maintainers <maintainers@users.noreply.a-seed-0f09c13e.example>");
MODULE_LICENSE("GPL");
