//! `switchboard init --from-mcp-json FILE [--out PATH]`: writes a config of the file's
//! servers and, beside it, a secrets file (mode 0600) with the literal `env`/`headers` values
//! that the config refers to as `${NAME}`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::{Map, Value};

use super::mcp_json;
use crate::cli::InitArgs;

pub(crate) fn init(args: &InitArgs) -> anyhow::Result<()> {
    let converted = mcp_json::convert_file(&args.from_mcp_json)?;
    for note in &converted.notes {
        println!("note: {note}");
    }
    for line in converted.rename_lines() {
        eprintln!("switchboard: {line}");
    }
    if converted.mapping.is_empty() {
        bail!("{}: no server to convert", args.from_mcp_json.display());
    }
    // Checked before anything is written: what init writes, serve accepts (the variables it
    // refers to may be set later).
    if let Err(errors) = super::checked(&converted.doc) {
        let errors = super::ConfigErrors {
            source_name: args.out.display().to_string(),
            errors,
        };
        return Err(anyhow::Error::from(errors)
            .context("the converted config is not valid (a bug in init)"));
    }
    let secrets_path = secrets_path(&args.out);
    let mut doc = Map::new();
    if !converted.secrets.is_empty() {
        let name = secrets_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        doc.insert("secretsFile".into(), name.into());
    }
    if let Value::Object(rest) = converted.doc {
        doc.extend(rest);
    }
    for path in
        std::iter::once(&args.out).chain((!converted.secrets.is_empty()).then_some(&secrets_path))
    {
        if path.exists() && !args.force {
            bail!("{} exists; pass --force to replace it", path.display());
        }
    }
    let yaml = serde_yaml_ng::to_string(&Value::Object(doc)).context("cannot write YAML")?;
    let header = format!(
        "# Switchboard config, converted from {} by `switchboard init`.\n\
         # Check it with `switchboard validate --config {}`; the schema is\n\
         # schema/switchboard.schema.json in the Switchboard repository.\n",
        args.from_mcp_json.display(),
        args.out.display()
    );
    std::fs::write(&args.out, header + &yaml)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    if !converted.secrets.is_empty() {
        write_secrets(&secrets_path, &converted.secrets)?;
        println!(
            "wrote {} (mode 0600): {} value(s) the config refers to as ${{NAME}}",
            secrets_path.display(),
            converted.secrets.len()
        );
    }
    for (original, name) in &converted.mapping {
        println!("  \"{original}\" -> backend {name}");
    }
    println!("next: switchboard serve --config {}", args.out.display());
    Ok(())
}

/// `dir/name.yaml` → `dir/name.secrets.env`.
fn secrets_path(out: &Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "switchboard".to_owned());
    out.with_file_name(format!("{stem}.secrets.env"))
}

/// Creates the file private to its owner before a byte of it is written.
fn write_secrets(path: &Path, secrets: &[(String, String)]) -> anyhow::Result<()> {
    let mut text = String::from(
        "# Secrets for the config beside this file (KEY=VALUE). Keep it private: Switchboard\n\
         # refuses it if group or others may read it.\n",
    );
    for (key, value) in secrets {
        if value.contains(['\n', '\r']) {
            bail!("the value of {key} spans lines, which a secrets file cannot hold");
        }
        text.push_str(&format!("{key}={value}\n"));
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    {
        // `mode` applies only when the file is created; a replaced one is narrowed too.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
