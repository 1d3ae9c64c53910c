"""OpenAI's audio API, whatever carries it: the names it answers to, its error object, and the Realtime API's
transcription session. The HTTP API (http_api/) serves its REST routes and the Realtime WebSocket, WebRTC (rtc/)
the Realtime calls; this package imports neither, and reaches the models only through the core."""
