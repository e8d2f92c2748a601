"""What every process of ours uses: paths, errors, records, starting processes, tracing."""
