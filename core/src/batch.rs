//! The batch abstraction: what the core needs to know about a batch, and nothing more.

use arrow_array::RecordBatch;

/// A batch of rows the core can count, weigh and slice.
///
/// The core is generic over it so that the simulator can use cheap synthetic batches while the
/// adapter ships real Arrow [`RecordBatch`]es. `Clone` must be cheap (a reference count), since
/// the core keeps every batch until it is durable and hands a clone to the transport.
pub trait Batch: Clone {
    /// Number of rows.
    fn rows(&self) -> u64;
    /// Size in bytes, as counted against the in-flight byte budget and the wire message limit.
    fn bytes(&self) -> u64;
    /// The rows `[offset, offset + len)`, clamped to the batch: must not panic on any input.
    #[must_use]
    fn slice(&self, offset: u64, len: u64) -> Self;
}

impl Batch for RecordBatch {
    fn rows(&self) -> u64 {
        self.num_rows() as u64
    }

    fn bytes(&self) -> u64 {
        self.get_array_memory_size() as u64
    }

    fn slice(&self, offset: u64, len: u64) -> Self {
        let rows = self.num_rows();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(rows);
        let len = usize::try_from(len).unwrap_or(usize::MAX).min(rows - start);
        RecordBatch::slice(self, start, len)
    }
}

/// A vector is a batch of one row per element; handy in examples and tests.
impl<T: Clone> Batch for Vec<T> {
    fn rows(&self) -> u64 {
        self.len() as u64
    }

    fn bytes(&self) -> u64 {
        (self.len() as u64).saturating_mul(std::mem::size_of::<T>().max(1) as u64)
    }

    fn slice(&self, offset: u64, len: u64) -> Self {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let len = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(self.len() - start);
        self[start..start + len].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array};
    use std::sync::Arc;

    fn ids(n: i64) -> RecordBatch {
        let col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        RecordBatch::try_from_iter([("id", col)]).unwrap()
    }

    #[test]
    fn record_batch_slices_are_clamped_not_panicking() {
        let b = ids(10);
        assert_eq!(Batch::rows(&b), 10);
        assert!(Batch::bytes(&b) >= 80);
        let s = Batch::slice(&b, 7, 100);
        assert_eq!(s.num_rows(), 3);
        let col = s.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(col.value(0), 7);
        assert_eq!(Batch::slice(&b, u64::MAX, u64::MAX).num_rows(), 0);
    }

    #[test]
    fn vec_slices_are_clamped_not_panicking() {
        let v = vec![1u32, 2, 3, 4];
        assert_eq!(v.bytes(), 16);
        assert_eq!(Batch::slice(&v, 1, 2), vec![2, 3]);
        assert_eq!(Batch::slice(&v, 3, u64::MAX), vec![4]);
        assert!(Batch::slice(&v, 9, 1).is_empty());
    }
}
