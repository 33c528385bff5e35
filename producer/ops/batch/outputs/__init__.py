"""What a finished batch is turned into for people and other tools: the transcripts of its
cases, a self-contained HTML report, and an Inspect AI eval log."""
