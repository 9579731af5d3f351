//! Reading the secrets a config names: the cluster secret, the admin token
//! and the metrics token, each from its file if one is set. Read at start,
//! never logged, and checked as the inline values are.

use super::*;

impl Config {
    /// The cluster secret, read from `cluster_secret_file` if set, else
    /// `cluster_secret`; `None` if neither is set (a one-node cluster).
    pub fn secret(&self) -> anyhow::Result<Option<Vec<u8>>> {
        if let Some(path) = &self.cluster_secret_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading cluster_secret_file {}", path.display()))?;
            let s = text.trim();
            ensure!(
                s.len() >= MIN_SECRET_LEN,
                "the cluster secret in {} must be at least {MIN_SECRET_LEN} bytes",
                path.display()
            );
            return Ok(Some(s.as_bytes().to_vec()));
        }
        Ok((!self.cluster_secret.is_empty()).then(|| self.cluster_secret.0.as_bytes().to_vec()))
    }

    /// Whether an admin token is configured (its file is read at start).
    pub fn has_admin_token(&self) -> bool {
        !self.admin_token.is_empty() || self.admin_token_file.is_some()
    }

    /// The metrics token, read from `metrics_token_file`, if set.
    pub fn metrics_token(&self) -> anyhow::Result<Option<String>> {
        let Some(path) = &self.metrics_token_file else { return Ok(None) };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading metrics_token_file {}", path.display()))?;
        let token = text.trim();
        validate::check_admin_token(token, &format!("the metrics token in {}", path.display()))?;
        Ok(Some(token.to_string()))
    }

    /// The admin token, read from `admin_token_file` if set, else
    /// `admin_token`; `None`: the node runs open.
    pub fn admin_token(&self) -> anyhow::Result<Option<String>> {
        if let Some(path) = &self.admin_token_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading admin_token_file {}", path.display()))?;
            let token = text.trim();
            validate::check_admin_token(token, &format!("the admin token in {}", path.display()))?;
            return Ok(Some(token.to_string()));
        }
        Ok((!self.admin_token.is_empty()).then(|| self.admin_token.0.clone()))
    }
}
