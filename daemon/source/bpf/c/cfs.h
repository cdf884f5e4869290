/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types cfs.bpf.c reads, for CO-RE: only the fields it
 * uses, with preserve_access_index so that libbpf-style loaders (here
 * cilium/ebpf) relocate every access against the running kernel's BTF.
 * Layout and size here do not matter; names and field names do.
 */
#ifndef __ESCRA_CFS_H
#define __ESCRA_CFS_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s64 s64;
typedef _Bool bool;
typedef s64 ktime_t;

#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_RB_AVAIL_DATA = 0,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct list_head {
	struct list_head *next;
	struct list_head *prev;
};

struct kernfs_node {
	u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
};

struct hrtimer {
	void *function;
};

struct cfs_bandwidth {
	ktime_t period;
	u64 quota;
	u64 runtime;
	struct hrtimer period_timer;
	struct hrtimer slack_timer;
	struct list_head throttled_cfs_rq;
	int nr_periods;
	int nr_throttled;
	u64 throttled_time;
};

struct task_group {
	struct cgroup_subsys_state css;
	struct cfs_bandwidth cfs_bandwidth;
};

struct cfs_rq {
	struct task_group *tg;
	int runtime_enabled;
	s64 runtime_remaining;
	int throttle_count;
	int throttled;		/* a 1-bit field since 6.18: read with CO-RE */
};

struct sched_entity {
	struct cfs_rq *cfs_rq;
};

struct task_struct {
	struct sched_entity se;
};

#pragma clang attribute pop

#endif /* __ESCRA_CFS_H */
