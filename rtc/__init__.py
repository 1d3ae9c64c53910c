"""WebRTC frontend (browser audio in, transcripts out): see issue 6."""
