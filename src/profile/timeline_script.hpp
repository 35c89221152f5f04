// The timeline page's own script: it draws the page's data (the JSON element that
// timeline_html.cpp writes, in the format described there) on the page's canvas, and makes it
// zoomable and pannable. It is apart from the page writer because it is a program of its own,
// in another language, with its own concerns (pixels, pointer events); the two meet only in
// the data's format and the page's element ids. It is src/profile/timeline.js, a file of its
// own, which the build embeds as kTimelineScript (cmake/embed_text.cmake writes the .cpp).
//
// What it draws, in this order, so that nothing hides a bar:
//
//   lanes    a row per lane of the data, its title and sub-title on the left;
//   axis     above and below, in the page's unit, labelled again as the view zooms and pans;
//   faint    only when "every dependency" is ticked: the arrows that held nothing back
//            (layout.hpp's Arrow::held_back), light and under the bars (the inputs of ops
//            that ran behind other work on their own stream, made long before: they would fan
//            out from the op that made them across the page);
//   bars     in their colour (waits hatched), narrower than a pixel merged into one mark per
//            pixel run; on each bar the longest of "name duration", "name", "duration" or the
//            name shortened with an ellipsis (3 characters at least) that fits it;
//   held     the arrows that held their target back, thin, over the bars;
//   hot      every arrow of the bar under the pointer (or chosen with `select`), dark, with
//            the bar outlined; its tooltip names what it waited for.
//
// More than MAX_ARROWS arrows in view are not drawn (the read-out says to zoom in), except
// the hot bar's. `window.eventideTimeline` lets a test or a console drive the view (view,
// full, set_view, zoom, pan, reset, select, every_dependency) and read what was drawn (stats,
// marks).
#pragma once

namespace eventide::profile {

// The script's text (JavaScript, no <script> tags; it contains no "</script>").
extern const char* const kTimelineScript;

}  // namespace eventide::profile
