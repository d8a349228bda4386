package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// The bizType settings API (subjects.md, "BizType settings"), in the task API's micro service.
const (
	APIBizPrefix = DefaultPrefix + ".api.biz"
	APIBizSet    = APIBizPrefix + ".set"
	APIBizGet    = APIBizPrefix + ".get"
	APIBizList   = APIBizPrefix + ".list"
)

// addBizEndpoints adds set, get and list under <prefix>.api.biz.
func (b *Bridge) addBizEndpoints(ctx context.Context, svc micro.Service) error {
	g := svc.AddGroup(b.cfg.subj.apiBiz)
	for _, ep := range []struct {
		name string
		h    func(context.Context, micro.Request)
	}{{"set", b.apiBizSet}, {"get", b.apiBizGet}, {"list", b.apiBizList}} {
		h := ep.h
		// Named biz-<op>: the task API has a get of its own.
		if err := g.AddEndpoint("biz-"+ep.name, micro.HandlerFunc(func(r micro.Request) { h(ctx, r) }),
			micro.WithEndpointSubject(ep.name)); err != nil {
			return err
		}
	}
	return nil
}

// apiBizSet applies a partial update by CAS on the bizType's key and answers with the result.
func (b *Bridge) apiBizSet(ctx context.Context, r micro.Request) {
	kv := b.svc.biz.kv // opened before the API starts (services)
	var u bizUpdate
	dec := json.NewDecoder(bytes.NewReader(r.Data()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		_ = r.Error("400", `the request body must be JSON such as {"biz_type":"reports","max_in_flight":100,"rate":50,"paused":true}: `+err.Error(), nil)
		return
	}
	if !validBizType(u.BizType) {
		_ = r.Error("400", "biz_type "+strings.TrimSpace(u.BizType)+": want one subject token of 1-64 characters from [A-Za-z0-9_-]", nil)
		return
	}
	for range 5 {
		cur, rev, err := b.loadBiz(ctx, u.BizType)
		if err != nil {
			_ = r.Error("500", err.Error(), nil)
			return
		}
		next, err := u.apply(cur)
		if err != nil {
			_ = r.Error("400", strings.ReplaceAll(err.Error(), "\n", "; "), nil)
			return
		}
		next.BizType, next.Revision = u.BizType, 0
		next.UpdatedAt = time.Now().UTC().Format(DueAtLayout)
		data, _ := json.Marshal(next)
		if rev == 0 {
			rev, err = kv.Create(ctx, u.BizType, data)
		} else {
			rev, err = kv.Update(ctx, u.BizType, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // another set got there first
		}
		if err != nil {
			_ = r.Error("500", "store the settings: "+err.Error(), nil)
			return
		}
		next.Revision = rev
		b.log.Info("bizType settings changed", "biz_type", u.BizType, "max_in_flight", next.MaxInFlight,
			"rate", next.Rate, "burst", next.Burst, "paused", next.Paused, "misfire", next.Misfire,
			"overlap", next.Overlap, "alarm_p99", next.AlarmP99)
		_ = r.RespondJSON(next)
		return
	}
	_ = r.Error("409", "the settings of "+u.BizType+" keep changing; try again", nil)
}

// loadBiz reads bizType's settings from the bucket: revision 0 if it has none.
func (b *Bridge) loadBiz(ctx context.Context, bizType string) (BizSettings, uint64, error) {
	e, err := b.svc.biz.kv.Get(ctx, bizType)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return BizSettings{BizType: bizType}, 0, nil
	case err != nil:
		return BizSettings{}, 0, errors.New("read the settings: " + err.Error())
	}
	s, err := decodeBiz(e)
	if err != nil {
		return BizSettings{}, 0, errors.New("the stored settings do not parse: " + err.Error())
	}
	return s, e.Revision(), nil
}

// apiBizGet answers with one bizType's settings (the request body is the bizType); one without
// settings has the zero ones, revision 0.
func (b *Bridge) apiBizGet(ctx context.Context, r micro.Request) {
	biz := strings.TrimSpace(string(r.Data()))
	if !validBizType(biz) {
		_ = r.Error("400", "the request body must be a bizType: one subject token of 1-64 characters from [A-Za-z0-9_-]", nil)
		return
	}
	s, _, err := b.loadBiz(ctx, biz)
	if err != nil {
		_ = r.Error("500", err.Error(), nil)
		return
	}
	_ = r.RespondJSON(s)
}

// apiBizList answers with every bizType that has settings, sorted, as this replica sees them.
func (b *Bridge) apiBizList(_ context.Context, r micro.Request) {
	all := b.biz.all()
	out := make([]BizSettings, 0, len(all))
	for _, s := range all {
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y BizSettings) int { return strings.Compare(x.BizType, y.BizType) })
	_ = r.RespondJSON(out)
}
