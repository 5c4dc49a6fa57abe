from django.urls import path

from . import views

urlpatterns = [
    path("welcome/", views.welcome),
    path("order/", views.order),
    path("broken/", views.broken),
]
