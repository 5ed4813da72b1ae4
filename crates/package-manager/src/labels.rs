//! The labels and annotations the package manager writes: the package
//! API's contract, spelt once in `types`.

pub use types::pkg::contract::{annotations::*, labels::*};
