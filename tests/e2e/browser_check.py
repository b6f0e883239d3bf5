#!/usr/bin/python3
"""The demo page in a real browser (headless Chromium through chromedriver).

    browser_check.py PAGE_URL SCREENSHOT_DIR

Loads the page that scripts/demo serves, and checks that:
  - the counter image rendered, at the size counter.cgi's SVG gives
    (12 + 11 per digit, at least six digits, by 24 pixels);
  - the text and the JSON show the same count as the image;
  - each reload counts one view more;
  - in a screenshot, the image's region holds the digits (pixels of the
    digits' colour on the counter's dark background), not a blank box.
Exit 0 when all hold, 1 with the reason otherwise, 77 when the browser
cannot be started here (the reason is printed).
"""
import json
import os
import sys

from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BACKGROUND = (0x1D, 0x1F, 0x21)  # the SVG's rect
DIGITS = (0xB5, 0xF5, 0x66)      # the SVG's text


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def near(a, b, tol=40):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


def start_browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=900,700", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    try:
        return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    except WebDriverException as e:
        print("SKIP: Chromium did not start: " + str(e).splitlines()[0])
        sys.exit(77)


def read_page(driver):
    """The page's three views of the count, once its script has shown them."""
    WebDriverWait(driver, 20).until(
        lambda d: d.find_element(By.ID, "status").get_attribute("data-state") in ("ready", "error"))
    status = driver.find_element(By.ID, "status")
    if status.get_attribute("data-state") != "ready":
        fail("the page says: " + status.text)
    img = driver.execute_script(
        "const i = document.getElementById('svg'); const r = i.getBoundingClientRect();"
        "return {complete: i.complete, nw: i.naturalWidth, nh: i.naturalHeight,"
        " x: r.left, y: r.top, w: r.width, h: r.height};")
    text = driver.find_element(By.ID, "text").text
    doc = json.loads(driver.find_element(By.ID, "json").text)
    return img, text, doc


def expected_width(count):
    return 12 + 11 * max(6, len(str(count)))


def check_load(driver, previous):
    img, text, doc = read_page(driver)
    if not text.isdigit():
        fail("the text view is not a count: %r" % text)
    count = int(text)
    if doc != {"id": "demo", "count": count}:
        fail("the JSON view %r does not match the text view %d" % (doc, count))
    if not img["complete"] or img["nw"] == 0:
        fail("the counter image did not render: %r" % img)
    want = (expected_width(count), 24)
    if (img["nw"], img["nh"]) != want or (round(img["w"]), round(img["h"])) != want:
        fail("the image is %dx%d (shown %gx%g), expected %dx%d for count %d"
             % (img["nw"], img["nh"], img["w"], img["h"], want[0], want[1], count))
    if previous is not None and count != previous + 1:
        fail("a reload took the count from %d to %d, expected %d" % (previous, count, previous + 1))
    return img, count


def check_screenshot(driver, img, path):
    driver.save_screenshot(path)
    shot = Image.open(path).convert("RGB")
    box = (int(img["x"]), int(img["y"]), int(img["x"] + img["w"]), int(img["y"] + img["h"]))
    region = shot.crop(box)
    pixels = list(region.getdata())
    dark = sum(1 for p in pixels if near(p, BACKGROUND, 12))
    lit = sum(1 for p in pixels if near(p, DIGITS))
    print("screenshot %s: image region %s, %d of %d pixels background, %d the digits' colour"
          % (path, box, dark, len(pixels), lit))
    if dark < len(pixels) // 3:
        fail("the image's region in the screenshot is not the counter's background")
    if lit < 30:
        fail("the image's region in the screenshot shows no digits (blank)")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(64)
    url, shots = sys.argv[1], sys.argv[2]
    driver = start_browser()
    try:
        driver.get(url)
        img, first = check_load(driver, None)
        print("ok: loaded, count %d; image %dx%d; text, JSON and image agree"
              % (first, img["nw"], img["nh"]))
        count = first
        for _ in range(3):
            driver.refresh()
            img, count = check_load(driver, count)
        print("ok: three reloads counted %d -> %d" % (first, count))
        check_screenshot(driver, img, os.path.join(shots, "demo-page.png"))
        print("ok: the screenshot shows the digits")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
