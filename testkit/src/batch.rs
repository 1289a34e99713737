//! A synthetic batch: an identity and a row range, no data. Slicing keeps track of which rows of
//! the original batch a slice holds, so the oracle can check exactly what was sent and acked.

use zerobus_sink::Batch;

/// Rows `[start, start + rows)` of synthetic batch `id`, each `bytes_per_row` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimBatch {
    /// Which admitted batch this is (or is a slice of).
    pub id: u64,
    /// First row of the original batch held here.
    pub start: u64,
    /// Rows held.
    pub rows: u64,
    /// Size of each row.
    pub bytes_per_row: u64,
    /// The batch's schema (its number; 0 for tables taken as they are).
    pub schema: u32,
}

impl SimBatch {
    /// A whole batch of `rows` rows.
    #[must_use]
    pub fn new(id: u64, rows: u64, bytes_per_row: u64) -> SimBatch {
        SimBatch {
            id,
            start: 0,
            rows,
            bytes_per_row,
            schema: 0,
        }
    }

    /// The same batch, of schema `schema`.
    #[must_use]
    pub fn of_schema(self, schema: u32) -> SimBatch {
        SimBatch { schema, ..self }
    }
}

impl Batch for SimBatch {
    fn rows(&self) -> u64 {
        self.rows
    }

    fn bytes(&self) -> u64 {
        self.rows.saturating_mul(self.bytes_per_row)
    }

    fn slice(&self, offset: u64, len: u64) -> SimBatch {
        let offset = offset.min(self.rows);
        let len = len.min(self.rows - offset);
        SimBatch {
            id: self.id,
            start: self.start + offset,
            rows: len,
            bytes_per_row: self.bytes_per_row,
            schema: self.schema,
        }
    }
}
