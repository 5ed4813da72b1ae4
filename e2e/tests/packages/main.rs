//! The package manager for real: packages built with `xpkg` and pushed to a
//! CNCF registry (HTTPS, testenv's CA), Providers installed by the six
//! controllers running as pods from `deploy/` (the shipped installation:
//! the local-node overlay plus operator configuration), their runtimes run
//! as pods on the test node, which pulls the runtime image from the same
//! registry.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod dependency_moves;
mod lifecycle;
mod refusals;
mod registries;
mod revisions;
mod runtimes;
mod signatures;

use e2e::packages::*;
use serde_json::Value;
use std::{
    process::Command,
    time::{Duration, Instant},
};
