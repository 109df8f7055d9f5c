//! autoproxy-generate as a library, so tests call the handler directly.

pub mod deps;
pub mod explain;
pub mod handler;
pub mod members;
mod plan;
mod report;
pub mod trigger;
