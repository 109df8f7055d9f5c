//! The networks as stored: account → its ranges, as text. Read back, each account must be a
//! 12-digit id and each range a prefix (`10.1.0.0/16`, `2600:1f18::/56`), or the manifest is
//! refused like any other it cannot trust.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::networks::{IpNet, Networks};

pub fn serialize<S: Serializer>(networks: &Networks, out: S) -> Result<S::Ok, S::Error> {
    let text: BTreeMap<&String, Vec<String>> = networks
        .ranges()
        .iter()
        .map(|(account, ranges)| (account, ranges.iter().map(IpNet::to_string).collect()))
        .collect();
    text.serialize(out)
}

pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Networks, D::Error> {
    let text = BTreeMap::<String, BTreeSet<String>>::deserialize(input)?;
    let mut networks = Networks::default();
    for (account, ranges) in text {
        for range in ranges {
            let network = range
                .parse::<IpNet>()
                .ok()
                .filter(|_| crate::model::is_account_id(&account))
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "network {account:?}: {range:?}: expected a 12-digit account and \
                         a prefix like 10.1.0.0/16"
                    ))
                })?;
            networks.insert(&account, network);
        }
    }
    Ok(networks)
}
