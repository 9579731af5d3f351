//! Business (tenant) commands: create, get, list, update config.

use crate::error::WireError;
use crate::ids::BizId;
use crate::limits::{MAX_BIZ_ID, MAX_LIST_MEMORY, MAX_NAME_LEN};
use serde::{Deserialize, Serialize};

/// Per-business behaviour. New fields are appended with a default so stored
/// registries keep decoding (the registry value carries a format version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BizConfig {
    /// Whether `dislike` / `undislike` are accepted.
    pub dislike_enabled: bool,
    /// How many of a user's most recent likes stay in memory while the user is active.
    pub user_list_memory: u32,
    /// How many of an entity's most recent likers stay in memory while it is active.
    pub liker_list_memory: u32,
}

impl Default for BizConfig {
    fn default() -> Self {
        BizConfig { dislike_enabled: true, user_list_memory: 100, liker_list_memory: 100 }
    }
}

impl BizConfig {
    pub fn validate(&self) -> Result<(), WireError> {
        if self.user_list_memory > MAX_LIST_MEMORY || self.liker_list_memory > MAX_LIST_MEMORY {
            return Err(WireError::bad_request(format!(
                "list memory must be at most {MAX_LIST_MEMORY}"
            )));
        }
        Ok(())
    }
}

/// A registered business.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Business {
    pub id: BizId,
    pub name: String,
    pub config: BizConfig,
}

/// Create a business; `id: None` asks the node to assign one: one above the
/// highest id in use, or the lowest free id when the highest is `MAX_BIZ_ID`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateBiz {
    pub id: Option<BizId>,
    pub name: String,
    pub config: BizConfig,
}

impl CreateBiz {
    pub fn validate(&self) -> Result<(), WireError> {
        if let Some(id) = self.id {
            if id == 0 || id > MAX_BIZ_ID {
                return Err(WireError::bad_request(format!(
                    "business id must be in 1..={MAX_BIZ_ID}"
                )));
            }
        }
        validate_name(&self.name)?;
        self.config.validate()
    }
}

/// Replace a business's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateBiz {
    pub id: BizId,
    pub config: BizConfig,
}

impl UpdateBiz {
    pub fn validate(&self) -> Result<(), WireError> {
        self.config.validate()
    }
}

fn validate_name(name: &str) -> Result<(), WireError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(WireError::bad_request(format!(
            "business name must be 1..={MAX_NAME_LEN} bytes"
        )));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(WireError::bad_request("business name must not contain control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_long_names_are_rejected() {
        let mut c = CreateBiz { id: None, name: String::new(), config: BizConfig::default() };
        assert!(c.validate().is_err());
        c.name = "x".repeat(MAX_NAME_LEN + 1);
        assert!(c.validate().is_err());
        c.name = "video".into();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn id_zero_is_reserved() {
        let c = CreateBiz { id: Some(0), name: "a".into(), config: BizConfig::default() };
        assert_eq!(c.validate().unwrap_err().code, crate::ErrorCode::BadRequest);
    }
}
