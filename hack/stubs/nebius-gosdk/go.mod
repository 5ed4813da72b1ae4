// Stand-in for github.com/nebius/gosdk, which the Go module proxy refuses
// (403): hack/build-binaries.sh replaces that module with this directory when
// it builds a provider-kubernetes release that requires it (v1.3.0 and later).
// It has only what provider-kubernetes' pkg/kube/client/nebius uses, and
// every function that can fail fails: nebius identity support is not built
// into the test binaries. Standard library only.
module github.com/nebius/gosdk

go 1.22
