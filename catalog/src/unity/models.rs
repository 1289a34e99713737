//! The JSON of the Unity Catalog and SQL Statement APIs, as this backend reads it: unknown
//! fields ignored, int64 fields as numbers or strings (Databricks sends numbers, the open-source
//! server strings), error codes as `error_code` or `errorCode`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// An int64 sent as a number or a numeric string.
pub(crate) fn int64_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrString {
        Num(i64),
        Str(String),
    }
    Ok(match Option::<NumOrString>::deserialize(d)? {
        None => None,
        Some(NumOrString::Num(n)) => Some(n),
        Some(NumOrString::Str(s)) => Some(s.trim().parse().map_err(serde::de::Error::custom)?),
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct ColumnInfo {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) type_text: Option<String>,
    #[serde(default)]
    pub(crate) type_json: Option<String>,
    #[serde(default)]
    pub(crate) type_name: Option<String>,
    #[serde(default)]
    pub(crate) type_precision: Option<u8>,
    #[serde(default)]
    pub(crate) type_scale: Option<u8>,
    #[serde(default, deserialize_with = "int64_lenient")]
    pub(crate) position: Option<i64>,
    #[serde(default)]
    pub(crate) comment: Option<String>,
    #[serde(default)]
    pub(crate) nullable: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct TableInfo {
    #[serde(default)]
    pub(crate) columns: Vec<ColumnInfo>,
    #[serde(default)]
    pub(crate) comment: Option<String>,
    #[serde(default)]
    pub(crate) properties: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) table_id: Option<String>,
    #[serde(default)]
    pub(crate) storage_location: Option<String>,
    #[serde(default)]
    pub(crate) table_type: Option<String>,
    #[serde(default)]
    pub(crate) data_source_format: Option<String>,
    #[serde(default, deserialize_with = "int64_lenient")]
    #[allow(dead_code)]
    pub(crate) created_at: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ServiceError {
    #[serde(default, alias = "errorCode")]
    pub(crate) error_code: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
    /// Some services nest the error: `{"error": {"message": ..}}`.
    #[serde(default)]
    pub(crate) error: Option<Box<ServiceError>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StatementError {
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) error_code: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StatementStatus {
    pub(crate) state: String,
    #[serde(default)]
    pub(crate) error: Option<StatementError>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StatementResponse {
    pub(crate) statement_id: String,
    pub(crate) status: StatementStatus,
    /// A query's result schema and chunking (once it SUCCEEDED).
    #[serde(default)]
    pub(crate) manifest: Option<ResultManifest>,
    /// A query's first chunk of rows (once it SUCCEEDED; `INLINE` disposition).
    #[serde(default)]
    pub(crate) result: Option<ResultData>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResultManifest {
    #[serde(default)]
    pub(crate) format: Option<String>,
    #[serde(default)]
    pub(crate) schema: Option<ResultSchema>,
    /// The result was cut at `row_limit` or `byte_limit`.
    #[serde(default)]
    pub(crate) truncated: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResultSchema {
    #[serde(default)]
    pub(crate) columns: Vec<ResultColumn>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResultColumn {
    pub(crate) name: String,
}

/// One chunk of an `INLINE`, `JSON_ARRAY` result: every value a string (or null).
#[derive(Debug, Deserialize)]
pub(crate) struct ResultData {
    #[serde(default)]
    pub(crate) data_array: Vec<Vec<Option<String>>>,
    #[serde(default, deserialize_with = "int64_lenient")]
    pub(crate) next_chunk_index: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct AwsTemp {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    #[serde(default)]
    pub(crate) session_token: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SasToken {
    pub(crate) sas_token: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct AadToken {
    pub(crate) aad_token: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct GcpToken {
    pub(crate) oauth_token: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct TemporaryCredentials {
    #[serde(default)]
    pub(crate) url: Option<String>,
    #[serde(default, deserialize_with = "int64_lenient")]
    pub(crate) expiration_time: Option<i64>,
    #[serde(default)]
    pub(crate) aws_temp_credentials: Option<AwsTemp>,
    #[serde(default)]
    pub(crate) azure_user_delegation_sas: Option<SasToken>,
    #[serde(default)]
    pub(crate) azure_aad: Option<AadToken>,
    #[serde(default)]
    pub(crate) gcp_oauth_token: Option<GcpToken>,
    #[serde(default)]
    pub(crate) r2_temp_credentials: Option<AwsTemp>,
    /// Anything else: a credential block of a provider this crate does not model is refused
    /// by name rather than silently dropped.
    #[serde(flatten)]
    pub(crate) other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct TokenResponse {
    pub(crate) access_token: String,
    #[serde(default, deserialize_with = "int64_lenient")]
    pub(crate) expires_in: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_fields_parse_as_numbers_or_strings_and_errors_in_both_spellings() {
        let t: TableInfo = serde_json::from_str(
            r#"{"created_at":"1795956061788","columns":[{"name":"id","position":"0"}]}"#,
        )
        .unwrap();
        assert_eq!(t.created_at, Some(1_795_956_061_788));
        assert_eq!(t.columns[0].position, Some(0));
        let t: TableInfo = serde_json::from_str(r#"{"created_at":1795956061788}"#).unwrap();
        assert_eq!(t.created_at, Some(1_795_956_061_788));
        assert!(serde_json::from_str::<TableInfo>(r#"{"created_at":"soon"}"#).is_err());
        let e: ServiceError =
            serde_json::from_str(r#"{"errorCode":"RESOURCE_NOT_FOUND","message":"gone"}"#).unwrap();
        assert_eq!(e.error_code.as_deref(), Some("RESOURCE_NOT_FOUND"));
        let e: ServiceError =
            serde_json::from_str(r#"{"error_code":"NOT_FOUND","message":"gone"}"#).unwrap();
        assert_eq!(e.error_code.as_deref(), Some("NOT_FOUND"));
    }
}
