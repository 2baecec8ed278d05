// Package wire holds the protobuf messages of the cluster package.
//
// wire.pb.go is generated from wire.proto; regenerate it with
//
//	go generate ./cluster/...
//
// It needs only the Go module proxy: buf compiles the .proto itself (no
// protoc), and runs protoc-gen-go at the version go.mod names, so that the
// generated code matches the protobuf runtime the module links.
package wire

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
