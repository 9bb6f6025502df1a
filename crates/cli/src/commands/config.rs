//! `sheaf config`: the settings in force (flags aside) and where each comes from; secrets masked.

use sheaf_core::Error;

use crate::args::ConfigArgs;
use crate::settings::{Settings, KEYS};

/// Run it.
///
/// # Errors
/// None: what cannot be read was refused when the settings were loaded.
pub fn run(settings: &Settings, a: ConfigArgs) -> Result<(), Error> {
    type Row<'a> = (String, Option<(String, String)>, &'a str);
    // A connection string is shown without its password (sheaf refuses one there anyway).
    let shown = |k: &str, v: String| if k == "pg-url" { sheaf_pg::connect::session::redact(&v) } else { v };
    let rows: Vec<Row> = KEYS.iter().map(|(k, what)| (k.to_string(), settings.shown(k).map(|(v, o)| (shown(k, v), o.to_string())), *what)).collect();
    let files: Vec<String> = settings.files().map(|p| p.display().to_string()).collect();
    let aws: Vec<(&str, String)> = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_PROFILE"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (*k, if k.contains("SECRET") || k.contains("TOKEN") || k.contains("KEY_ID") { mask(&v) } else { v })))
        .collect();
    if a.json {
        let settings: serde_json::Map<String, serde_json::Value> =
            rows.iter().map(|(k, v, _)| (k.clone(), v.as_ref().map_or(serde_json::Value::Null, |(v, o)| serde_json::json!({"value": v, "from": o})))).collect();
        let aws: serde_json::Map<String, serde_json::Value> = aws.into_iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect();
        say!("{}", serde_json::json!({"files": files, "settings": settings, "aws_environment": aws}));
        return Ok(());
    }
    say!("config files read: {}", if files.is_empty() { "none (/etc/sheaf/sheaf.toml, ~/.config/sheaf/sheaf.toml)".to_string() } else { files.join(", ") });
    // Columns as wide as their longest entry: the names, then the values.
    let width = rows.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
    let value_width = rows.iter().filter_map(|(_, v, _)| v.as_ref().map(|(v, _)| v.len())).max().unwrap_or(0).max("(not set)".len());
    for (k, v, what) in &rows {
        match v {
            Some((v, o)) => say!("{k:<width$} = {v:<value_width$} from {o}"),
            None => say!("{k:<width$}   {:<value_width$} ({what})", "(not set)"),
        }
    }
    let aws_width = aws.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in aws {
        say!("{k:<aws_width$} {v}  (environment, read by the S3 client)");
    }
    Ok(())
}

fn mask(v: &str) -> String {
    if v.len() <= 4 {
        "****".into()
    } else {
        format!("{}****", &v[..2])
    }
}
