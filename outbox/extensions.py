"""The Flask extension objects of the web side, bound to the app in create_app."""

from flask_login import LoginManager
from flask_mail import Mail
from flask_migrate import Migrate
from flask_wtf import CSRFProtect

mail = Mail()
migrate = Migrate()
login_manager = LoginManager()
csrf = CSRFProtect()
