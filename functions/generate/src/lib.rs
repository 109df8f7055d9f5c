//! autoproxy-generate as a library, so tests call the handler directly.

pub mod handler;
pub mod plan;
pub mod trigger;
