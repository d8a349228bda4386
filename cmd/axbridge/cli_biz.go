package main

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/axbridge/axbridge/bridge"
	"github.com/axbridge/axbridge/bridge/ui"
)

func (c *cli) replicas() error {
	var out bridge.ReplicasPage
	if err := c.call("task.replicas", nil, &out); err != nil || c.json {
		return err
	}
	var rows [][]string
	for _, r := range out.Replicas {
		house := ""
		if r.Housekeeper {
			house = "housekeeper"
		}
		rows = append(rows, []string{r.ID, fmt.Sprintf("%d/%d", r.Owned, out.Partitions), ui.Ranges(r.Partitions), itoa(len(r.Loading)),
			itoa(r.Indexed), r.LeaseLeft, itoa(r.Members), house})
	}
	c.table([]string{"REPLICA", "OWNED", "PARTITIONS", "LOADING", "INDEXED", "LEASE_LEFT", "SEES", ""}, rows)
	return nil
}

// bizOut is a bizType's settings as the API shows them.
type bizOut = bridge.BizSettings

func (c *cli) printBiz(bs []bizOut) {
	var rows [][]string
	for _, b := range bs {
		rows = append(rows, []string{b.BizType, strconv.FormatBool(b.Paused), itoa(b.MaxInFlight), strconv.FormatFloat(b.Rate, 'g', -1, 64),
			itoa(b.Burst), b.Misfire, b.Overlap, b.AlarmP99, b.UpdatedAt})
	}
	c.table([]string{"BIZ_TYPE", "PAUSED", "MAX_IN_FLIGHT", "RATE", "BURST", "MISFIRE", "OVERLAP", "ALARM_P99", "UPDATED_AT"}, rows)
}

func (c *cli) bizList(args []string) error {
	if len(args) != 0 {
		return errors.New("biz list takes no arguments")
	}
	var out struct {
		BizTypes []bizOut `json:"biz_types"`
	}
	if err := c.call("biz.list", nil, &out); err != nil || c.json {
		return err
	}
	sort.Slice(out.BizTypes, func(i, j int) bool { return out.BizTypes[i].BizType < out.BizTypes[j].BizType })
	c.printBiz(out.BizTypes)
	return nil
}

func (c *cli) bizGet(args []string) error {
	if len(args) != 1 {
		return errors.New("biz get takes one bizType")
	}
	var b bizOut
	if err := c.call("biz.get", args[0], &b); err != nil || c.json {
		return err
	}
	c.printBiz([]bizOut{b})
	return nil
}

// bizSet sets the settings whose flags were given, and leaves the others.
func (c *cli) bizSet(args []string) error {
	if len(args) != 1 {
		return errors.New("biz set takes one bizType, and the settings to change as flags")
	}
	q := map[string]any{"biz_type": args[0]}
	for flag, v := range map[string]any{"max-in-flight": c.o.maxInFlight, "rate": c.o.rate, "burst": c.o.burst,
		"misfire": c.o.misfire, "overlap": c.o.overlap, "alarm-p99": c.o.alarmP99} {
		if c.o.set[flag] {
			q[strings.ReplaceAll(flag, "-", "_")] = v
		}
	}
	if len(q) == 1 {
		return errors.New("biz set: give the settings to change: --max-in-flight, --rate, --burst, --misfire, --overlap, --alarm-p99")
	}
	return c.bizUpdate(q)
}

func (c *cli) bizPause(paused bool) func([]string) error {
	return func(args []string) error {
		if len(args) != 1 {
			return errors.New("biz pause and resume take one bizType")
		}
		return c.bizUpdate(map[string]any{"biz_type": args[0], "paused": paused})
	}
}

func (c *cli) bizUpdate(q map[string]any) error {
	var b bizOut
	if err := c.call("biz.set", q, &b); err != nil || c.json {
		return err
	}
	c.printBiz([]bizOut{b})
	return nil
}
