package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/supervisor"
)

// ReportRequest is what an agent asks for. The jsonschema tags become the
// descriptions in the start tool's input schema.
type ReportRequest struct {
	Topic    string `json:"topic" jsonschema:"what the report is about"`
	Sections int    `json:"sections" jsonschema:"how many sections to write, 1 to 20"`
	// A durable pause between sections stands in for slow work (a crawl,
	// a human review): the run outlives the tool call that started it.
	PauseSeconds int `json:"pause_seconds,omitempty" jsonschema:"seconds to wait between sections, 0 to 3600"`
}

// Report is the workflow's result, the result tool's output.
type Report struct {
	Topic    string   `json:"topic"`
	Sections []string `json:"sections"`
	Words    int      `json:"words"`
}

type sectionRequest struct {
	Topic string
	N     int
}

// writeSection is the side effect: here it makes up a paragraph; in a real
// service it would call a model or a search API. Its result is recorded, so
// a restart does not write a section twice.
var writeSection = actor.Activity("write_section", func(ctx context.Context, r sectionRequest) (string, error) {
	return fmt.Sprintf("Section %d on %s: what is known, what is not, and what to look at next.", r.N, r.Topic), nil
}, actor.WithRetry(supervisor.Exponential(100*time.Millisecond, 2, 5*time.Second, 5)))

var report = actor.Workflow("report", func(ctx *actor.Context, req ReportRequest) (Report, error) {
	switch {
	case strings.TrimSpace(req.Topic) == "":
		return Report{}, errors.New("topic is empty")
	case req.Sections < 1 || req.Sections > 20:
		return Report{}, fmt.Errorf("sections is %d, want 1 to 20", req.Sections)
	case req.PauseSeconds < 0 || req.PauseSeconds > 3600:
		return Report{}, fmt.Errorf("pause_seconds is %d, want 0 to 3600", req.PauseSeconds)
	}
	out := Report{Topic: req.Topic}
	for n := 1; n <= req.Sections; n++ {
		if n > 1 && req.PauseSeconds > 0 {
			// A durable timer: the instance may be unloaded meanwhile, and
			// a cancel ends the wait.
			if err := ctx.Sleep(time.Duration(req.PauseSeconds) * time.Second); err != nil {
				return Report{}, err
			}
		}
		s, err := writeSection.Run(ctx, sectionRequest{Topic: req.Topic, N: n})
		if err != nil {
			return Report{}, err
		}
		out.Sections = append(out.Sections, s)
		out.Words += len(strings.Fields(s))
	}
	return out, nil
})
