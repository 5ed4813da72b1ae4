// Small static programs for the test node (hack/build-binaries.sh builds
// them; crates/testenv packs them into one-layer images). Standard library
// only, so building them needs no network.
module crossplane-rs.invalid/node-programs

go 1.22
