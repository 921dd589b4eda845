"""Files in and out, upstream of everything: the canonical recording format
(:mod:`drive.io.recording`), whole-or-nothing writes (:mod:`drive.io.atomic`), container indexes of
video files (:mod:`drive.io.video_index`) and timing helpers (:mod:`drive.io.timing`)."""
