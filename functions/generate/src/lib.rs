//! autoproxy-generate as a library, so tests call the handler directly.

pub mod handler;
mod plan;
pub mod trigger;
