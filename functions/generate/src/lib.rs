//! autoproxy-generate as a library, so tests call the handler directly.

pub mod handler;
pub mod members;
mod plan;
mod report;
pub mod trigger;
