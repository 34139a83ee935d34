"""``microbatch backfill``: the offline regime. A bounded range of the input topics, read by assignment,
scored with large batches through the service's own loop, committed under the job's own group."""
