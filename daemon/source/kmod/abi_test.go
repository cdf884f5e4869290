package kmod

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const uapiHeader = "../../../kmod/escra_uapi.h"

// parseUAPI reads the #define and enum constants of a C header into a map
// from C name to value (numbers) or quoted string (string defines).
func parseUAPI(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	defineRe := regexp.MustCompile(`^#define\s+(\w+)\s+(.+?)\s*(/\*.*)?$`)
	enumStart := regexp.MustCompile(`^enum\s+\w+\s*\{`)
	memberRe := regexp.MustCompile(`^\s*(\w+)\s*(=\s*([^,/]+?))?\s*,?\s*(/\*.*)?$`)
	exprRe := regexp.MustCompile(`^\((\w+)\s*-\s*1\)$`)

	out := map[string]string{}
	inEnum := false
	next := 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case inEnum && strings.HasPrefix(text, "}"):
			inEnum = false
		case inEnum:
			if text == "" || strings.HasPrefix(text, "/*") || strings.HasPrefix(text, "*") {
				continue
			}
			m := memberRe.FindStringSubmatch(text)
			if m == nil {
				return nil, fmt.Errorf("%s:%d: cannot parse enum member %q", path, line, text)
			}
			if m[3] != "" {
				v, err := strconv.Atoi(strings.TrimSpace(m[3]))
				if err != nil {
					return nil, fmt.Errorf("%s:%d: enum value %q: %v", path, line, m[3], err)
				}
				next = v
			}
			out[m[1]] = strconv.Itoa(next)
			next++
		case enumStart.MatchString(text):
			inEnum, next = true, 0
		case strings.HasPrefix(text, "#define"):
			m := defineRe.FindStringSubmatch(text)
			if m == nil {
				continue // include guard
			}
			val := m[2]
			if e := exprRe.FindStringSubmatch(val); e != nil {
				base, ok := out[e[1]]
				if !ok {
					return nil, fmt.Errorf("%s:%d: %s refers to unknown %s", path, line, m[1], e[1])
				}
				n, _ := strconv.Atoi(base)
				val = strconv.Itoa(n - 1)
			}
			out[m[1]] = val
		}
	}
	return out, sc.Err()
}

func TestGoConstantsMatchUAPIHeader(t *testing.T) {
	c, err := parseUAPI(uapiHeader)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ESCRA_GENL_NAME":       strconv.Quote(FamilyName),
		"ESCRA_GENL_VERSION":    strconv.Itoa(FamilyVersion),
		"ESCRA_MCGRP_TELEMETRY": strconv.Quote(GroupTelemetry),

		"ESCRA_CMD_UNSPEC":      strconv.Itoa(CmdUnspec),
		"ESCRA_CMD_WATCH":       strconv.Itoa(CmdWatch),
		"ESCRA_CMD_UNWATCH":     strconv.Itoa(CmdUnwatch),
		"ESCRA_CMD_OOM_REPLY":   strconv.Itoa(CmdOOMReply),
		"ESCRA_CMD_GET_STATS":   strconv.Itoa(CmdGetStats),
		"ESCRA_CMD_TELEMETRY":   strconv.Itoa(CmdTelemetry),
		"ESCRA_CMD_OOM_REQUEST": strconv.Itoa(CmdOOMRequest),
		"ESCRA_CMD_MAX":         strconv.Itoa(CmdMax),

		"ESCRA_A_UNSPEC":      strconv.Itoa(AttrUnspec),
		"ESCRA_A_PAD":         strconv.Itoa(AttrPad),
		"ESCRA_A_CGROUP_ID":   strconv.Itoa(AttrCgroupID),
		"ESCRA_A_REQUEST_ID":  strconv.Itoa(AttrRequestID),
		"ESCRA_A_GRANTED":     strconv.Itoa(AttrGranted),
		"ESCRA_A_RECORD":      strconv.Itoa(AttrRecord),
		"ESCRA_A_USAGE_BYTES": strconv.Itoa(AttrUsageBytes),
		"ESCRA_A_MAX_BYTES":   strconv.Itoa(AttrMaxBytes),
		"ESCRA_A_NR_PAGES":    strconv.Itoa(AttrNrPages),
		"ESCRA_A_STATS":       strconv.Itoa(AttrStats),
		"ESCRA_A_MAX":         strconv.Itoa(AttrMax),

		"ESCRA_REC_UNSPEC":       strconv.Itoa(RecUnspec),
		"ESCRA_REC_PAD":          strconv.Itoa(RecPad),
		"ESCRA_REC_CGROUP_ID":    strconv.Itoa(RecCgroupID),
		"ESCRA_REC_SEQ":          strconv.Itoa(RecSeq),
		"ESCRA_REC_QUOTA_NS":     strconv.Itoa(RecQuotaNs),
		"ESCRA_REC_PERIOD_NS":    strconv.Itoa(RecPeriodNs),
		"ESCRA_REC_UNUSED_NS":    strconv.Itoa(RecUnusedNs),
		"ESCRA_REC_THROTTLED":    strconv.Itoa(RecThrottled),
		"ESCRA_REC_NR_THROTTLED": strconv.Itoa(RecNrThrottled),
		"ESCRA_REC_THROTTLED_NS": strconv.Itoa(RecThrottledNs),
		"ESCRA_REC_TIMESTAMP_NS": strconv.Itoa(RecTimestampNs),
		"ESCRA_REC_USED_NS":      strconv.Itoa(RecUsedNs),
		"ESCRA_REC_KIND":         strconv.Itoa(RecKind),

		"ESCRA_REC_KIND_PERIOD":   strconv.Itoa(RecKindPeriod),
		"ESCRA_REC_KIND_THROTTLE": strconv.Itoa(RecKindThrottle),
		"ESCRA_REC_KIND_NEAR":     strconv.Itoa(RecKindNear),
		"ESCRA_REC_MAX":           strconv.Itoa(RecMax),

		"ESCRA_STAT_UNSPEC":           strconv.Itoa(StatUnspec),
		"ESCRA_STAT_PAD":              strconv.Itoa(StatPad),
		"ESCRA_STAT_WATCHED":          strconv.Itoa(StatWatched),
		"ESCRA_STAT_RECORDS_SENT":     strconv.Itoa(StatRecordsSent),
		"ESCRA_STAT_RECORDS_DROPPED":  strconv.Itoa(StatRecordsDropped),
		"ESCRA_STAT_OOM_REQUESTS":     strconv.Itoa(StatOOMRequests),
		"ESCRA_STAT_OOM_GRANTED":      strconv.Itoa(StatOOMGranted),
		"ESCRA_STAT_OOM_TIMEOUTS":     strconv.Itoa(StatOOMTimeouts),
		"ESCRA_STAT_HOOK_NS_TOTAL":    strconv.Itoa(StatHookNsTotal),
		"ESCRA_STAT_HOOK_CALLS":       strconv.Itoa(StatHookCalls),
		"ESCRA_STAT_WATCHES_RELEASED": strconv.Itoa(StatWatchesReleased),
		"ESCRA_STAT_OOM_UNSENT":       strconv.Itoa(StatOOMUnsent),
		"ESCRA_STAT_DRAIN_NS_TOTAL":   strconv.Itoa(StatDrainNsTotal),
		"ESCRA_STAT_EVENTS":           strconv.Itoa(StatEvents),
		"ESCRA_STAT_MAX":              strconv.Itoa(StatMax),
	}
	for name, w := range want {
		got, ok := c[name]
		if !ok {
			t.Errorf("%s: Go has it, %s does not", name, uapiHeader)
			continue
		}
		if got != w {
			t.Errorf("%s = %s in %s, %s in Go", name, got, uapiHeader, w)
		}
	}
	// Every ESCRA_ constant of the header must have a Go twin.
	for name := range c {
		if strings.HasPrefix(name, "ESCRA_") || strings.HasPrefix(name, "__ESCRA_") {
			if _, ok := want[name]; !ok && !strings.HasPrefix(name, "__") {
				t.Errorf("%s is in %s but has no Go constant", name, uapiHeader)
			}
		}
	}
}

func TestParseUAPIRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/bad.h"
	if err := os.WriteFile(p, []byte("enum x {\n\tA = zz,\n};\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseUAPI(p); err == nil {
		t.Fatal("parseUAPI accepted a non-numeric enum value")
	}
}
