//! [`Live`]: what a [`Registry`](crate::Registry) changes on a reload:
//! the configuration in force, and each policy's plans and limiters.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::configuration::config::Config;
use crate::configuration::policy_limiters::PolicyLimiters;
use crate::middleware::plans::PlanSwitch;

/// The configuration in force, and for each policy the plans its layer
/// reads and the maker of its limiters.
#[derive(Debug)]
pub(crate) struct Live {
    /// One reload at a time.
    pub(crate) in_force: tokio::sync::Mutex<Config>,
    pub(crate) policies: BTreeMap<String, LivePolicy>,
}

#[derive(Debug)]
pub(crate) struct LivePolicy {
    /// The plans its layer reads.
    pub(crate) switch: Arc<PlanSwitch>,
    /// The maker of its limiters, on its keys.
    pub(crate) limiters: PolicyLimiters,
}

impl Live {
    pub(crate) fn new(config: Config) -> Self {
        Self {
            in_force: tokio::sync::Mutex::new(config),
            policies: BTreeMap::new(),
        }
    }

    pub(crate) fn add(&mut self, name: &str, switch: Arc<PlanSwitch>, limiters: PolicyLimiters) {
        let policy = LivePolicy { switch, limiters };
        self.policies.insert(name.to_owned(), policy);
    }
}
