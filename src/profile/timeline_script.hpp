// The timeline page's own script: it draws the page's data (the JSON element that
// timeline_html.cpp writes, in the format described there) on the page's canvas, and makes it
// zoomable and pannable. It is apart from the page writer because it is a program of its own,
// in another language, with its own concerns (pixels, pointer events); the two meet only in
// the data's format and the page's element ids.
#pragma once

namespace eventide::profile {

// The script's text (JavaScript, no <script> tags; it contains no "</script>").
extern const char* const kTimelineScript;

}  // namespace eventide::profile
