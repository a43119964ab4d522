//! `compositeTools`: each composite validated and compiled (`core::workflow::plan`), its
//! errors reported with their paths like every other config error.

use std::sync::Arc;

use switchboard_core::workflow::{compile_all, CompositeSpec, Plan};

use super::model::ConfigFile;
use super::ConfigError;

/// The file's composite tools, compiled.
pub(crate) fn plans(file: &ConfigFile) -> Result<Vec<Arc<Plan>>, Vec<ConfigError>> {
    let plans =
        compile_all(&file.composite_tools).map_err(|e| vec![ConfigError::new(&e.at, e.why)])?;
    let backends: Vec<&str> = file.backends.iter().map(|b| b.name.as_str()).collect();
    let astray = steps_without_backend(&file.composite_tools, &backends);
    if !astray.is_empty() {
        return Err(astray);
    }
    Ok(plans.into_iter().map(Arc::new).collect())
}

/// Every step whose `tool` is `backend.tool` for a backend the file does not have. (An
/// exposed tool name never holds a dot, so a dotted name can only mean a backend's own tool;
/// an undotted one is checked against the catalog once it is warm.)
fn steps_without_backend(specs: &[CompositeSpec], backends: &[&str]) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        for (j, step) in spec.steps.iter().enumerate() {
            let at = format!("compositeTools[{i}].steps[{j}]");
            let inner = step.step.as_deref().map(|s| (format!("{at}.step.tool"), s));
            for (path, s) in std::iter::once((format!("{at}.tool"), step)).chain(inner) {
                let Some(tool) = s.tool.as_deref() else {
                    continue;
                };
                let Some((backend, _)) = tool.split_once('.') else {
                    continue;
                };
                if !backends.contains(&backend) {
                    let why = format!(
                        "`{tool}` names no backend: `{backend}` is not in backends ({})",
                        backends.join(", ")
                    );
                    errors.push(ConfigError::new(&path, why));
                }
            }
        }
    }
    errors
}
