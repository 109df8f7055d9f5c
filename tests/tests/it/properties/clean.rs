//! What a clean config is: only plain host names, each route on its own line, nothing added.

use super::*;

/// Labels of a-z 0-9 - _, none empty, at most 63 each and 253 in all: what `names.rs` admits
/// (without the wildcard, which never reaches a route).
pub(super) fn is_host(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

/// A route's SNI: a host name, or for a suffix a dot and a host name.
pub(super) fn is_sni(route: &Route) -> bool {
    match route.sni_match {
        SniMatch::Exact => is_host(&route.sni),
        SniMatch::Suffix => route.sni.strip_prefix('.').is_some_and(is_host),
    }
}

/// The provenance fields of a route line (rule, account, zone id): one token of letters,
/// digits, `-`, `_` and `.`.
pub(super) fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Every line of a config but the route lines and the two header lines that depend on them:
/// what no route may change.
pub(super) fn skeleton(text: &str) -> Vec<&str> {
    text.split('\n')
        .filter(|line| {
            !line.starts_with(ROUTE_LINE)
                && !line.starts_with(SUFFIX_LINE)
                && !line.starts_with("# sha256: ")
                && !line.starts_with("# rules: ")
        })
        .collect()
}

pub(super) fn route_lines(text: &str) -> Vec<&str> {
    text.split('\n')
        .filter(|line| line.starts_with(ROUTE_LINE) || line.starts_with(SUFFIX_LINE))
        .collect()
}

pub(super) fn expected_line(route: &Route) -> String {
    let (prefix, key) = match route.sni_match {
        SniMatch::Exact => (ROUTE_LINE, route.sni.as_str()),
        SniMatch::Suffix => (
            SUFFIX_LINE,
            route.sni.strip_prefix('.').unwrap_or(&route.sni),
        ),
    };
    format!(
        "{prefix}{key} {}:{} {} {} {}",
        route.back, route.port, route.rule, route.account, route.zone_id
    )
}

/// The checks every rendered config must pass whatever it was made from: no line added or
/// changed outside the route lines, one route line per route. (The renderer itself checks that
/// the header reads back.)
pub(super) fn check_structure(
    text: &str,
    routes: &[Route],
    baseline: &[String],
) -> Result<(), TestCaseError> {
    prop_assert!(!text.contains('\r'), "a carriage return in the config");
    prop_assert_eq!(
        skeleton(text),
        baseline,
        "a line outside the route table changed"
    );
    let lines = route_lines(text);
    let expected: Vec<String> = routes.iter().map(expected_line).collect();
    prop_assert_eq!(lines, expected, "the route lines are not one per route");
    Ok(())
}

/// What only allowed bytes in every value give: printable ASCII and newlines only, each route
/// line six fields of the allowed sets, and the route maps the apply document writes holding
/// exactly the routes.
pub(super) fn check_clean(text: &str, routes: &[Route]) -> Result<(), TestCaseError> {
    if let Some(bad) = text
        .bytes()
        .find(|b| *b != b'\n' && !(0x20..0x7f).contains(b))
    {
        return Err(TestCaseError::fail(format!(
            "byte {bad:#04x} in the config: {:?}",
            route_lines(text)
        )));
    }
    for (line, route) in route_lines(text).iter().zip(routes) {
        prop_assert!(is_sni(route), "SNI {:?} reached the config", route.sni);
        prop_assert!(is_host(route.back.as_str()), "backend {:?}", route.back);
        for token in [&route.rule, &route.account, &route.zone_id] {
            prop_assert!(is_token(token), "{token:?} reached the config");
        }
        prop_assert_eq!(line.split(' ').count(), 6, "{}", line);
    }
    let (mut exact, mut suffixes) = (String::new(), String::new());
    for route in routes {
        let (table, key) = match route.sni_match {
            SniMatch::Exact => (&mut exact, route.sni.as_str()),
            SniMatch::Suffix => (&mut suffixes, route.sni.trim_start_matches('.')),
        };
        let _ = writeln!(table, "{key} {}:{}", route.back, route.port);
    }
    prop_assert_eq!(MapFiles::route_tables(text), (exact, suffixes));
    Ok(())
}

/// The embedded template, as the generator's handler renders it.
pub(super) struct Render {
    pub(super) renderer: Renderer,
    pub(super) resolvers: Vec<SocketAddr>,
    pub(super) options: RenderOptions,
    pub(super) baselines: RefCell<HashMap<u64, Vec<String>>>,
}

impl Render {
    pub(super) fn new() -> Render {
        Render {
            renderer: Renderer::new(DEFAULT_TEMPLATE).unwrap(),
            resolvers: vec!["169.254.169.253:53".parse().unwrap()],
            options: RenderOptions::default(),
            baselines: RefCell::new(HashMap::new()),
        }
    }

    pub(super) fn render(
        &self,
        routes: &[Route],
        generation: u64,
    ) -> Result<String, autoproxy::render::RenderError> {
        self.renderer
            .render(&RenderInput {
                routes,
                resolvers: &self.resolvers,
                proxies: &[],
                options: &self.options,
                generation,
                generated_at: GENERATED_AT,
                trigger: "schedule",
            })
            .map(|rendered| rendered.text)
    }

    /// The skeleton of the config without routes, at this generation.
    pub(super) fn baseline(&self, generation: u64) -> Vec<String> {
        self.baselines
            .borrow_mut()
            .entry(generation)
            .or_insert_with(|| {
                let text = self.render(&[], generation).unwrap();
                skeleton(&text).into_iter().map(str::to_owned).collect()
            })
            .clone()
    }
}

pub(super) fn proxies() -> Vec<HostName> {
    vec![HostName::parse(PROXY).unwrap()]
}

/// A warning about a skipped name reads as an error: it says what was expected, on one line.
pub(super) fn check_warning_text(warning: &Warning) -> Result<(), TestCaseError> {
    let text = warning.to_string();
    prop_assert!(
        text.contains("skipped") && text.contains(": expected"),
        "unclear warning: {text}"
    );
    prop_assert!(
        !text.chars().any(char::is_control),
        "a control character in the warning {text:?}"
    );
    Ok(())
}
