//! autoproxy-generate as a library, so tests call the handler directly.

pub mod batch;
pub mod deps;
pub mod ec2;
pub mod explain;
pub mod handler;
pub mod invocation;
pub mod members;
mod plan;
pub mod queue;
mod report;
pub mod trigger;
pub mod vpcs;
