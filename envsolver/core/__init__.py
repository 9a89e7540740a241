"""What every stage uses: errors, redaction, bounded reads, processes, names, versions, arch lists."""
