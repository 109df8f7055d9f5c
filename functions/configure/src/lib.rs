//! autoproxy-configure as a library, so tests call the handler directly.

pub mod handler;
