//! autoproxy-agent-publisher as a library, so tests call the handler directly.

pub mod elf;
pub mod handler;
pub mod published;
pub mod response;
