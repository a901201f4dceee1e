#!/usr/bin/env bash
# open3d and pyrealsense2 need Debian's libusb-1.0-0. Install it when we are root,
# otherwise say exactly what to install.
set -u
if ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's libusb-1.0-0 (needed by open3d and pyrealsense2)" >&2
  (apt-get install -y -qq libusb-1.0-0 >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libusb-1.0-0 >/dev/null; }) && exit 0
fi
echo "error: libusb-1.0 is missing; open3d and pyrealsense2 cannot load without it." >&2
echo "       install it as root:  apt-get install libusb-1.0-0   (Debian/Ubuntu)" >&2
exit 1
