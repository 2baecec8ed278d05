package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// api is what a package exports: top-level names, and for each type its
// fields and methods.
type api struct {
	names   map[string]bool
	members map[string]map[string]bool
	// open types embed another type or alias one: a member not found may
	// come from there, so it is not reported.
	open map[string]bool
}

// packages maps the package names the docs use to their directories.
var packages = map[string]string{
	"actor":       "actor",
	"cli":         "cli",
	"cluster":     "cluster",
	"events":      "events",
	"mailbox":     "mailbox",
	"metrics":     "metrics",
	"nornmcp":     "nornmcp",
	"norntype":    "norntype",
	"persistence": "persistence",
	"postgres":    "persistence/postgres",
	"sqlite":      "persistence/sqlite",
	"storeurl":    "persistence/storeurl",
	"supervisor":  "supervisor",
	"timers":      "timers",
	"tracing":     "tracing",
	"viewer":      "viewer",
}

// loadAPI parses the non-test Go files of a package directory.
func loadAPI(t *testing.T, dir string) api {
	t.Helper()
	a := api{names: map[string]bool{}, members: map[string]map[string]bool{}, open: map[string]bool{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	member := func(typ, name string) {
		if a.members[typ] == nil {
			a.members[typ] = map[string]bool{}
		}
		a.members[typ][name] = true
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					a.names[d.Name.Name] = true
					continue
				}
				member(receiverType(d.Recv.List[0].Type), d.Name.Name)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							a.names[n.Name] = true
						}
					case *ast.TypeSpec:
						a.names[s.Name.Name] = true
						if s.Assign != 0 {
							a.open[s.Name.Name] = true
						}
						switch tt := s.Type.(type) {
						case *ast.StructType:
							for _, fld := range tt.Fields.List {
								if len(fld.Names) == 0 {
									a.open[s.Name.Name] = true
								}
								for _, n := range fld.Names {
									member(s.Name.Name, n.Name)
								}
							}
						case *ast.InterfaceType:
							for _, m := range tt.Methods.List {
								if len(m.Names) == 0 {
									a.open[s.Name.Name] = true
								}
								for _, n := range m.Names {
									member(s.Name.Name, n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return a
}

// receiverType is the type name of a method's receiver: T, *T, T[X], *T[X].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// has reports whether the package exports name, and, if member is given,
// whether the type name has that field or method.
func (a api) has(name, member string) bool {
	if !a.names[name] {
		return false
	}
	if member == "" || a.open[name] {
		return true
	}
	return a.members[name][member]
}
