#!/bin/sh
# Adds Mergesmith to this user's application menu (no root needed): copies the menu entry, with the full path of
# the `mergesmith` next to this script, and the icons into ~/.local/share. Run it again after moving the folder.
#   ./install-desktop-entry.sh               install or update
#   ./install-desktop-entry.sh --uninstall   remove the menu entry and icons
set -eu

here=$(cd "$(dirname "$0")" && pwd -P)
resources="$here/_internal/resources"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
entry="$data/applications/mergesmith.desktop"
icons="$data/icons/hicolor"

refresh_caches() {
    # Menus notice new entries without these on most desktops; they only speed things up, so failures are fine.
    if command -v update-desktop-database >/dev/null 2>&1; then update-desktop-database -q "$data/applications" || true; fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1; then gtk-update-icon-cache -q -t "$icons" || true; fi
}

if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$entry" "$icons/scalable/apps/mergesmith.svg" "$icons"/*/apps/mergesmith.png
    refresh_caches
    echo "Removed Mergesmith from the application menu."
    exit 0
fi

if [ ! -x "$here/mergesmith" ] || [ ! -f "$resources/mergesmith.desktop" ]; then
    echo "Run this script from the unpacked Mergesmith folder (it needs the mergesmith program next to it)." >&2
    exit 1
fi

# The Exec value is quoted by the desktop entry rules: inside double quotes, " ` $ and \ take a backslash, then
# every backslash is doubled because the value is also an escaped string; % is doubled for field codes.
exec_path=$(printf '%s' "$here/mergesmith" | sed -e 's/[\\"`$]/\\&/g' -e 's/\\/\\\\/g' -e 's/%/%%/g')

mkdir -p "$data/applications" "$icons/scalable/apps"
sed -e "s|^Exec=.*|Exec=\"$(printf '%s' "$exec_path" | sed -e 's/[|&\\]/\\&/g')\"|" \
    "$resources/mergesmith.desktop" > "$entry.tmp"
mv "$entry.tmp" "$entry"

cp "$resources/icons/mergesmith.svg" "$icons/scalable/apps/mergesmith.svg"
for png in "$resources"/icons/mergesmith-*.png; do
    size=${png##*-}
    size=${size%.png}
    mkdir -p "$icons/${size}x${size}/apps"
    cp "$png" "$icons/${size}x${size}/apps/mergesmith.png"
done

refresh_caches
echo "Mergesmith is in the application menu (entry: $entry)."
echo "It starts $here/mergesmith; run this script again if you move the folder."
