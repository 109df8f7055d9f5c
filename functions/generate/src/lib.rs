//! autoproxy-generate as a library, so tests call the handler directly.

pub mod explain;
pub mod handler;
mod plan;
pub mod trigger;
