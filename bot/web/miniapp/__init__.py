"""Long forms as a Telegram Mini App: the page under `/app/`, launch-data checks, answers read by `mapping`.

`app` holds the routes (I/O); `forms` and `initdata` are pure; `static/` is the page (HTML, CSS, a script).
"""

from bot.web.miniapp.app import APP_PATH, MiniApp
from bot.web.miniapp.forms import wants_page
from bot.web.miniapp.initdata import check_init_data, sign_init_data

__all__ = ["APP_PATH", "MiniApp", "check_init_data", "sign_init_data", "wants_page"]
