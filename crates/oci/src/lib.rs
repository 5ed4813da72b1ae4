//! OCI images written from files, with no container daemon: layers (gzip
//! tars with fixed owners and times, so the same files always give the same
//! digest), an image config, the manifest, OCI image-layout archives that
//! `ctr images import` reads, and pushes to registries (the OCI distribution API on
//! reqwest, rustls on ring).
//!
//! ```no_run
//! # async fn demo() -> Result<(), oci::Error> {
//! use oci::{Auth, Config, Image, LayerBuilder, Tls};
//! let layer = LayerBuilder::new()
//!     .file("usr/local/bin/hello", 0o755, std::fs::read("hello").unwrap_or_default())
//!     .build()?;
//! let image = Image::new(Config {
//!     entrypoint: vec!["/usr/local/bin/hello".into()],
//!     ..Config::default()
//! })
//! .layer(layer);
//! image.write_archive("hello.tar".as_ref(), "registry.local/hello:1")?;
//! let pem = std::fs::read("ca.crt").unwrap_or_default();
//! image.push("127.0.0.1:5000/hello:1", &Auth::Anonymous, &Tls::Ca(pem)).await?;
//! # Ok(()) }
//! ```
//!
//! The rooms: [`mod@reference`] parses a reference (names are fully
//! qualified); [`registry`] is the client push and pull share (HTTP,
//! authentication and token exchange, where credentials may go, paged
//! lists); [`pull`] reads packages (its cache keeps them by digest);
//! [`xpkg`] is the Crossplane package format and [`stack`] the stack
//! package format. Pulling treats everything a registry serves as data,
//! and reading a package is bounded ([`limits`]).
//!
//! [`project`] builds the crossplane-rs image itself: a Debian base layer
//! ([`debian`]) and the six binaries.

pub mod cosign;
pub mod debian;
mod describe;
mod error;
mod guard;
mod image;
mod layer;
pub mod limits;
pub mod project;
pub mod pull;
mod push;
pub mod reference;
pub mod registry;
pub mod stack;
#[cfg(any(test, feature = "test-server"))]
pub mod test_server;
mod text;
mod unpack;
pub mod xpkg;

/// The binaries' allocator in this crate's unit tests too: some count what
/// they allocate with its per-thread counters.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub use error::{Cause, Error};
pub use image::{
    CONFIG_MEDIA_TYPE, CONTAINERD_NAME_ANNOTATION, Config, INDEX_MEDIA_TYPE, Image,
    LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, REF_NAME_ANNOTATION, Serialized, host_architecture,
};
pub use layer::{Content, Digest, Entry, Layer, LayerBuilder};
pub use limits::Limits;
pub use push::{Platform, Pushed, push_index};
pub use registry::{Auth, RegistryPolicy, Tls};
pub use text::RegistryText;
