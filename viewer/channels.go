package viewer

import (
	"net/http"
	"time"

	"github.com/nornlabs/norn/norntype"
)

// channelsData is the channels and queues page.
type channelsData struct {
	pageData
	Channels []channelRow
	// Waiting sums the messages waiting on all channels.
	Waiting int
}

type channelRow struct {
	Channel     string
	Mode        norntype.Mode
	Subscribers int
	Waiting     int
	Oldest      time.Time
	// Stuck: messages wait and nobody subscribes to take them.
	Stuck bool
}

// channels lists every channel with subscribers or waiting messages: its
// mode, subscribers, waiting messages and the oldest one's age.
func (h *handler) channels(w http.ResponseWriter, r *http.Request) {
	stats, err := h.sys.ChannelStats(r.Context())
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	d := &channelsData{pageData: h.page("Channels")}
	d.Nav, d.Refresh = "channels", true
	h.header(r.Context(), &d.pageData)
	for _, c := range stats {
		d.Channels = append(d.Channels, channelRow{Channel: c.Channel, Mode: c.Mode, Subscribers: c.Subscribers,
			Waiting: c.Waiting, Oldest: c.Oldest, Stuck: c.Waiting > 0 && c.Subscribers == 0})
		d.Waiting += c.Waiting
	}
	h.render(w, r, http.StatusOK, "channels", d)
}

// countsData is the page of instance counts by workflow and status.
type countsData struct {
	pageData
	Rows     []workflowCounts
	Statuses []string
	Error    string
}

// counts shows the instances by workflow and status, each count linking
// to the list of those instances.
func (h *handler) counts(w http.ResponseWriter, r *http.Request) {
	d := &countsData{pageData: h.page("Counts"), Statuses: allStatuses}
	d.Nav, d.Refresh = "counts", true
	counts, err := h.instanceCounts(r.Context())
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	h.header(r.Context(), &d.pageData)
	d.Rows = h.byWorkflow(counts)
	h.render(w, r, http.StatusOK, "counts", d)
}
