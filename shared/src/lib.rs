//! autoproxy: keeps a fleet of HAProxy peering proxies in step with Route53.
//!
//! The pure core (no I/O): [`names`], [`near_miss`], [`rules`], [`model`], [`render`],
//! [`artifact`], [`ownership`], [`diff`], [`fleet`], [`manifest`], [`publish`], [`settings`],
//! [`accounts`], [`warnings`], [`networks`], [`time`]. The edges are few and named for what they talk to: [`route53`],
//! [`organizations`], [`discovery`], [`s3`], [`metrics`].

pub mod accounts;
pub mod artifact;
pub mod aws_error;
pub mod diff;
pub mod discovery;
pub mod fleet;
pub mod manifest;
pub mod metrics;
pub mod model;
pub mod names;
pub mod near_miss;
pub mod networks;
pub mod organizations;
pub mod ownership;
pub mod publish;
pub mod ratelimit;
pub mod render;
pub mod route53;
pub mod rules;
pub mod s3;
pub mod settings;
pub mod time;
pub mod warnings;

/// How much of a refused payload, record or field an error quotes (with [`excerpt`]): an
/// error must not carry a 200 kB value.
pub const QUOTED_CHARS: usize = 200;

/// At most `max_bytes` of `text`, cut at a character boundary and marked `…` where cut: how
/// much of a refused payload or field an error or a comment may carry.
pub fn excerpt(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::excerpt;

    #[test]
    fn an_excerpt_is_cut_at_a_character_boundary() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        // "é" is two bytes: a cut inside it steps back before it.
        assert_eq!(excerpt("aéb", 2), "a…");
    }
}
