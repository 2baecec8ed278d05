package cli

import (
	"runtime/debug"
	"testing"
)

// The version shown: the module's when it has one, else the checkout's
// commit and time, else "devel"; never "(devel)".
func TestVersionOf(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-04T10:00:00Z"}}
	for _, c := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Path: "github.com/nornlabs/norn", Version: "v1.4.0"}, Settings: vcs}, "v1.4.0"},
		{debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "github.com/nornlabs/norn", Version: "v1.2.3"}}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Path: "github.com/nornlabs/norn", Version: "(devel)"}, Settings: vcs},
			"devel 0123456789ab (2026-12-04T10:00:00Z)"},
		{debug.BuildInfo{Main: debug.Module{Path: "github.com/nornlabs/norn", Version: "(devel)"},
			Settings: append(vcs, debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, "devel 0123456789ab-dirty (2026-12-04T10:00:00Z)"},
		{debug.BuildInfo{Main: debug.Module{Path: "github.com/nornlabs/norn", Version: "(devel)"}}, "devel"},
	} {
		if got := versionOf(&c.bi); got != c.want {
			t.Errorf("versionOf(%+v) = %q, want %q", c.bi.Main, got, c.want)
		}
	}
}
