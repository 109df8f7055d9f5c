//! CloudWatch Embedded Metric Format: one JSON line on stdout per invocation, which Lambda's
//! log pipeline turns into metrics without any API call.

use std::io::Write;

use serde_json::{Map, Value, json};

/// Metrics of one invocation, in namespace `autoproxy` with dimension `Function` (and one
/// more, when set).
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    function: &'static str,
    dimension: Option<(&'static str, String)>,
    values: Vec<(&'static str, &'static str, f64)>,
}

impl Metrics {
    pub fn new(function: &'static str) -> Self {
        Metrics {
            function,
            dimension: None,
            values: Vec::new(),
        }
    }

    /// A second dimension for every value of this document (an account the guard holds).
    pub fn dimension(&mut self, name: &'static str, value: &str) -> &mut Self {
        self.dimension = Some((name, value.to_owned()));
        self
    }

    pub fn count(&mut self, name: &'static str, value: u64) -> &mut Self {
        // Counts stay far below 2^53: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        self.values.push((name, "Count", value as f64));
        self
    }

    pub fn milliseconds(&mut self, name: &'static str, value: u128) -> &mut Self {
        #[allow(clippy::cast_precision_loss)]
        self.values.push((name, "Milliseconds", value as f64));
        self
    }

    pub fn seconds(&mut self, name: &'static str, value: u64) -> &mut Self {
        #[allow(clippy::cast_precision_loss)]
        self.values.push((name, "Seconds", value as f64));
        self
    }

    /// The EMF document.
    pub fn to_json(&self, timestamp_ms: u128) -> Value {
        let definitions: Vec<Value> = self
            .values
            .iter()
            .map(|(name, unit, _)| json!({"Name": name, "Unit": unit}))
            .collect();
        let mut root = Map::new();
        let dimensions = match &self.dimension {
            None => json!([["Function"]]),
            Some((name, _)) => json!([["Function", name]]),
        };
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": u64::try_from(timestamp_ms).unwrap_or(u64::MAX),
                "CloudWatchMetrics": [{
                    "Namespace": "autoproxy",
                    "Dimensions": dimensions,
                    "Metrics": definitions,
                }],
            }),
        );
        root.insert("Function".into(), json!(self.function));
        if let Some((name, value)) = &self.dimension {
            root.insert((*name).into(), json!(value));
        }
        for (name, _, value) in &self.values {
            root.insert((*name).into(), json!(value));
        }
        Value::Object(root)
    }

    /// Writes the EMF line to stdout (the one place a function writes there directly), and
    /// returns the document written.
    pub fn emit(&self) -> Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let document = self.to_json(now);
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{document}");
        document
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_document_shape() {
        let mut metrics = Metrics::new("generate");
        metrics
            .count("Routes", 3)
            .milliseconds("DurationMs", 1500)
            .seconds("MaxBehindSeconds", 90);
        let doc = metrics.to_json(1_700_000_000_000);
        assert_eq!(doc["Function"], "generate");
        assert_eq!(doc["Routes"], 3.0);
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "autoproxy"
        );
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Unit"],
            "Milliseconds"
        );
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"][2]["Unit"],
            "Seconds"
        );
        assert_eq!(doc["MaxBehindSeconds"], 90.0);
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_000u64);
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"]])
        );
    }

    #[test]
    fn a_second_dimension_names_its_value() {
        let doc = Metrics::new("generate")
            .dimension("Account", "111111111111")
            .count("AccountHeld", 1)
            .to_json(0);
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function", "Account"]])
        );
        assert_eq!(doc["Account"], "111111111111");
        assert_eq!(doc["AccountHeld"], 1.0);
    }
}
