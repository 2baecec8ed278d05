package cli

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/persistence"
)

func migrateCommand() *command {
	return &command{
		name: "migrate", summary: "create or upgrade the store's schema and print its version",
		help: `Opening a store applies the migrations it lacks (every node does so at
start); migrate does only that, so that a deploy can upgrade the schema
first. It creates an SQLite file that does not exist yet.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("migrate", "migrate takes no arguments")
				}
				st, u, err := e.openStore("migrate", true)
				if err != nil {
					return err
				}
				defer st.Close()
				info, err := e.storeInfo(st, u)
				if err != nil {
					return err
				}
				out := struct {
					storeJSON
					Norn string `json:"norn"`
				}{storeJSON: info, Norn: moduleVersion()}
				if e.json {
					return e.writeJSON(out)
				}
				t := newTable(e.stdout)
				t.row("Store:", out.Driver+" "+out.Store)
				t.row("Schema version:", out.schemaLabel())
				t.row("Norn:", out.Norn)
				return t.flush()
			}
		},
	}
}

// storeJSON is a store and its schema version, which counts the
// migrations of its driver: SQLite's and PostgreSQL's differ.
type storeJSON struct {
	Store         string `json:"store"`
	Driver        string `json:"driver"`
	SchemaVersion int    `json:"schema_version"`
}

func (s storeJSON) schemaLabel() string {
	return fmt.Sprintf("%s schema %d", s.Driver, s.SchemaVersion)
}

// storeInfo describes an open store: driver, where (without a password)
// and schema version.
func (e *env) storeInfo(st persistence.Store, u string) (storeJSON, error) {
	out := storeJSON{Store: describeStore(u)}
	switch s := st.(type) {
	case interface{ Target() string }:
		out.Driver, out.Store = "postgres", s.Target()
	case interface{ Path() string }:
		out.Driver, out.Store = "sqlite", s.Path()
	}
	if v, ok := st.(interface {
		SchemaVersion(context.Context) (int, error)
	}); ok {
		var err error
		if out.SchemaVersion, err = v.SchemaVersion(e.ctx); err != nil {
			return out, err
		}
	}
	return out, nil
}

// moduleVersion is the version of the norn module in this binary: its
// module version when built as a dependency or with go install …@version;
// else, for a build from a checkout, "devel" with the VCS revision (and
// "-dirty" for uncommitted changes) and its commit time; else "devel".
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	const module = "github.com/nornlabs/norn"
	v := ""
	if bi.Main.Path == module {
		v = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			v = d.Version
			if d.Replace != nil && d.Replace.Version != "" {
				v = d.Replace.Version
			}
		}
	}
	if v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	out := "devel " + rev[:min(len(rev), 12)]
	if dirty {
		out += "-dirty"
	}
	if at != "" {
		out += " (" + at + ")"
	}
	return out
}

func versionCommand() *command {
	return &command{
		name: "version", summary: "print the version of norn in this binary, and the store's schema version",
		help: `Prints the norn module's version: a release tag, or for a build from a
checkout "devel" with the commit and its time. With a store (--store or
$` + StoreEnv + `) it also prints the store's schema version, which counts
its driver's migrations: SQLite's and PostgreSQL's numbers differ.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("version", "version takes no arguments")
				}
				out := struct {
					Norn  string     `json:"norn"`
					Store *storeJSON `json:"store,omitempty"`
				}{Norn: moduleVersion()}
				if e.storeURL != "" || e.getenv(StoreEnv) != "" {
					st, u, err := e.openStore("version", false)
					if err != nil {
						return err
					}
					defer st.Close()
					info, err := e.storeInfo(st, u)
					if err != nil {
						return err
					}
					out.Store = &info
				}
				if e.json {
					return e.writeJSON(out)
				}
				fmt.Fprintf(e.stdout, "%s %s\n", e.name, out.Norn)
				if out.Store != nil {
					fmt.Fprintf(e.stdout, "store: %s (%s)\n", out.Store.schemaLabel(), out.Store.Store)
				}
				return nil
			}
		},
	}
}

func membersCommand() *command {
	return &command{
		name: "members", synopsis: "--seeds HOST:PORT,...", summary: "join a cluster's gossip as a client and list its members",
		help: `Joins the cluster through the given seeds (gossip addresses of any
running nodes) as a client member, which owns no instances, lists the
members it learns of (itself included, as a client), and leaves. It needs
no store. Its gossip and remote endpoints listen on free ports of --bind,
which the nodes must be able to reach.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			timeout := fs.Duration("timeout", 15*time.Second, "give up joining after this")
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("members", "members takes no arguments, only flags")
				}
				cfg, err := e.clusterConfig("members")
				if err != nil {
					return err
				}
				if cfg == nil {
					return usagef("members", "--seeds (or $%s) is required", SeedsEnv)
				}
				cl, err := cluster.New(*cfg)
				if err != nil {
					return usagef("members", "%v", err)
				}
				ctx, cancel := context.WithTimeout(e.ctx, *timeout)
				defer cancel()
				noop := func([]string) {}
				err = cl.Join(ctx, actor.ClusterHost{NodeID: e.nodeID(), Wake: noop, Changed: noop, Logger: e.log})
				if err != nil {
					return fmt.Errorf("join the cluster: %w", err)
				}
				members := cl.Members()
				leaveCtx, cancelLeave := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancelLeave()
				if err := cl.Leave(leaveCtx); err != nil {
					e.log.Warn("leaving the cluster failed; the nodes will find this client gone", "err", err)
				}
				if err := cl.Close(); err != nil {
					e.log.Warn("closing the cluster endpoints", "err", err)
				}
				return e.printMembers(members)
			}
		},
	}
}

// clusterConfig is the client member's cluster configuration, or nil
// without seeds.
func (e *env) clusterConfig(cmd string) (*cluster.Config, error) {
	seeds := e.seeds
	if seeds == "" {
		seeds = e.getenv(SeedsEnv)
	}
	if seeds == "" {
		return nil, nil
	}
	cfg := cluster.LAN()
	cfg.GossipBindPort, cfg.RemoteBindPort = 0, 0
	cfg.GossipBindAddr, cfg.RemoteBindAddr = e.bind, e.bind
	cfg.Client = true
	cfg.Logger = e.log
	for _, s := range strings.Split(seeds, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Seeds = append(cfg.Seeds, s)
		}
	}
	key := e.secretKey
	if key == "" {
		key = e.getenv(KeyEnv)
	}
	if key != "" {
		b, err := hex.DecodeString(key)
		if err != nil {
			return nil, usagef(cmd, "--secret-key is not hex: %v", err)
		}
		cfg.SecretKey = b
	}
	files := []string{e.flagOrEnv(e.tlsCA, TLSCAEnv), e.flagOrEnv(e.tlsCert, TLSCertEnv), e.flagOrEnv(e.tlsKey, TLSKeyEnv)}
	switch n := len(slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == "" })); n {
	case 0:
	case 3:
		var err error
		if cfg.RemoteServerTLS, cfg.RemoteClientTLS, err = cluster.MutualTLS(files[0], files[1], files[2]); err != nil {
			return nil, usagef(cmd, "%v", err)
		}
	default:
		return nil, usagef(cmd, "--tls-ca, --tls-cert and --tls-key go together")
	}
	return &cfg, nil
}

// flagOrEnv is a flag's value, or the environment variable's if the flag
// is empty.
func (e *env) flagOrEnv(flag, env string) string {
	if flag != "" {
		return flag
	}
	return e.getenv(env)
}

// nodeID names the command in leases and in the cluster.
func (e *env) nodeID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("norn-cli-%s-%d", host, os.Getpid())
}

type memberJSON struct {
	Name       string `json:"name"`
	GossipAddr string `json:"gossip_addr"`
	RemoteAddr string `json:"remote_addr"`
	Client     bool   `json:"client"`
	State      string `json:"state"`
}

func (e *env) printMembers(ms []cluster.Member) error {
	if e.json {
		out := make([]memberJSON, len(ms))
		for i, m := range ms {
			out[i] = memberJSON{Name: m.Name, GossipAddr: m.GossipAddr, RemoteAddr: m.RemoteAddr, Client: m.Client, State: m.State.String()}
		}
		return e.writeJSON(out)
	}
	t := newTable(e.stdout, "NAME", "GOSSIP", "REMOTE", "ROLE", "STATE")
	for _, m := range ms {
		role := "node"
		if m.Client {
			role = "client"
		}
		t.row(m.Name, m.GossipAddr, m.RemoteAddr, role, m.State.String())
	}
	return t.flush()
}
