//! `compositeTools`: each composite validated and compiled (`core::workflow::plan`), its
//! errors reported with their paths like every other config error.

use std::sync::Arc;

use switchboard_core::workflow::{compile_all, Plan};

use super::model::ConfigFile;
use super::ConfigError;

/// The file's composite tools, compiled.
pub(crate) fn plans(file: &ConfigFile) -> Result<Vec<Arc<Plan>>, Vec<ConfigError>> {
    compile_all(&file.composite_tools)
        .map(|plans| plans.into_iter().map(Arc::new).collect())
        .map_err(|e| vec![ConfigError::new(&e.at, e.why)])
}
