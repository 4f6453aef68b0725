package browser

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/worqr/worqr-go/worqr"
)

// contrastJS lists the text of the page that does not stand out from what
// is behind it: for every visible element with text of its own (and every
// SVG text), the WCAG contrast ratio of its colour over its background
// (the backgrounds of it and its ancestors, composited), under 4.5 (3 for
// large text). It returns the page's background luminance first.
const contrastJS = `(function () {
  function parse(c) {
    var m = /rgba?\(([^)]+)\)/.exec(c || "");
    if (!m) return null;
    var p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  }
  function over(top, under) {
    return { r: top.r * top.a + under.r * (1 - top.a), g: top.g * top.a + under.g * (1 - top.a), b: top.b * top.a + under.b * (1 - top.a), a: 1 };
  }
  function lum(c) {
    function ch(v) { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }
    return 0.2126 * ch(c.r) + 0.7152 * ch(c.g) + 0.0722 * ch(c.b);
  }
  function background(el) {
    var layers = [];
    for (var e = el; e; e = e.parentElement) {
      var c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
    }
    var out = { r: 255, g: 255, b: 255, a: 1 };
    for (var i = layers.length - 1; i >= 0; i--) out = over(layers[i], out);
    return out;
  }
  var bad = [];
  document.querySelectorAll("body *").forEach(function (el) {
    if (el.closest("script,style,title,option")) return;
    var own = Array.from(el.childNodes).some(function (n) { return n.nodeType === 3 && n.textContent.trim() !== ""; });
    if (!own || el.getClientRects().length === 0) return;
    var st = getComputedStyle(el);
    if (st.visibility === "hidden" || st.display === "none") return;
    var svg = el instanceof SVGElement;
    var fg = parse(svg ? st.fill : st.color);
    if (!fg) return;
    var bg = background(svg ? el.ownerSVGElement.parentElement : el);
    fg = over(fg, bg);
    var a = lum(fg), b = lum(bg), ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    var size = parseFloat(st.fontSize), large = size >= 24 || (size >= 18.66 && parseInt(st.fontWeight, 10) >= 700);
    if (ratio < (large ? 3 : 4.5)) {
      bad.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className && el.className.baseVal === undefined ? "." + String(el.className).split(" ").join(".") : "") +
        " " + JSON.stringify(el.textContent.trim().slice(0, 30)) + " ratio " + ratio.toFixed(2));
    }
  });
  return { Page: lum(background(document.body)), Bad: bad };
})()`

type contrast struct {
	Page float64 // the luminance of the page's background
	Bad  []string
}

// themePages seeds a namespace with something on every kind of page (dead
// tasks with errors, a scheduled and a waiting task, a paused queue, an
// ordered queue with a blocked key, schedules, one paused) and returns
// the pages to look at.
func themePages(t *testing.T, s *site) []string {
	ctx := context.Background()
	s.kill("reports", 3, "render: template \"footer\" missing")
	if _, err := s.client.Enqueue(ctx, "emails", []byte(`{"to":"ada@example.com"}`), nil); err != nil {
		t.Fatal(err)
	}
	sid, err := s.client.Enqueue(ctx, "emails", []byte(`{"to":"later@example.com"}`), &worqr.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Pause(ctx, "emails"); err != nil {
		t.Fatal(err)
	}
	dead, _, err := s.in.Tasks(ctx, "reports", worqr.StateDead, 0, 1)
	if err != nil || len(dead) == 0 {
		t.Fatalf("no dead task: %v", err)
	}
	s.seedKeys()
	s.startScheduler(worqr.Schedule{Name: "hourly", Queue: "pings", Every: time.Hour},
		worqr.Schedule{Name: "nightly", Queue: "reports", Cron: "0 30 2 * * *"})
	if err := s.in.PauseSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	return []string{"/", "/queue?name=emails", "/queue?name=emails&state=scheduled", "/queue?name=reports&state=dead",
		"/queue?name=reports&state=dead&error=footer", "/task?id=" + dead[0].ID, "/task?id=" + sid, "/dead", "/workers",
		"/flows", "/keys?queue=orders&key=order-1", "/schedules", "/nope"}
}

// checkContrast opens every page in b and fails on text that is hard to
// read; dark says which scheme the page's background must be in.
func checkContrast(t *testing.T, b context.Context, base string, pages []string, dark bool) {
	t.Helper()
	for _, p := range pages {
		var c contrast
		if err := chromedp.Run(b, chromedp.Navigate(base+p), chromedp.WaitVisible(`main`, chromedp.ByQuery),
			chromedp.Sleep(300*time.Millisecond), // the first live counts
			chromedp.Evaluate(contrastJS, &c)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if dark != (c.Page < 0.1) {
			t.Errorf("%s: background luminance %.2f, want it %s", p, c.Page, map[bool]string{true: "dark", false: "light"}[dark])
		}
		for _, bad := range c.Bad {
			t.Errorf("%s: hard to read: %s", p, bad)
		}
	}
}

// TestDarkModeFollowsTheSystem: with the system in dark mode
// (prefers-color-scheme: dark) every page is dark, and all of its text,
// badges and chart labels keep a readable contrast (WCAG AA); in light
// mode too.
func TestDarkModeFollowsTheSystem(t *testing.T) {
	s := newSite(t, nil)
	pages := themePages(t, s)
	b := browser(t)
	for _, dark := range []bool{true, false} {
		scheme := map[bool]string{true: "dark", false: "light"}[dark]
		t.Run(scheme, func(t *testing.T) {
			if err := chromedp.Run(b, emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{
				{Name: "prefers-color-scheme", Value: scheme}})); err != nil {
				t.Fatal(err)
			}
			checkContrast(t, b, s.url, pages, dark)
		})
	}
}
