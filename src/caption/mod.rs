//! Batch captioning (`hrx caption`): finding the images of a job and the JSON Lines file that
//! records each result as soon as it is known, so a killed job resumes where it stopped; the
//! sidecar files other tools read; shards of a job spread over many boxes; the review report.

pub mod discover;
pub mod journal;
pub mod report;
pub mod shard;
pub mod sidecar;
